"""`ajet-runner` command line: one typer app; its command groups live in cli/commands/."""

from __future__ import annotations

import typer

from ajet_runner.cli.commands import (
    catalogue_command as catalogue,
)
from ajet_runner.cli.commands import (
    check_command as check,
)
from ajet_runner.cli.commands import (
    client_commands as client,
)
from ajet_runner.cli.commands import (
    diagnose_command as diagnose,
)
from ajet_runner.cli.commands import (
    results_command as results,
)
from ajet_runner.cli.commands import (
    run_command as run,
)
from ajet_runner.cli.commands import (
    serve_command as serve,
)
from ajet_runner.cli.commands import (
    session_host_command as session_host,
)
from ajet_runner.cli.commands import stage_commands as stages
from ajet_runner.cli.commands import up_command as up
from ajet_runner.cli.commands import worker_command as worker

app = typer.Typer(
    name="ajet-runner",
    help="Run AgentJet experiment blueprints: tmux, watching, repairs, reports, finish.flag.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"ajet-runner {version('ajet-runner')}")
        except PackageNotFoundError:
            typer.echo("ajet-runner (not installed as a package)")
        raise typer.Exit(0)


@app.callback()
def _root(
    _show_version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="print the version and exit"),
) -> None:
    """Run AgentJet experiment blueprints: tmux, watching, repairs, reports, finish.flag."""


for module in (check, results, diagnose, run, up, worker, session_host, serve, client, stages, catalogue):
    module.register(app)


def main() -> None:
    from ajet_runner.cli.commands.help_text import tidy

    tidy(typer.main.get_command(app))(prog_name="ajet-runner")


if __name__ == "__main__":
    main()
