"""`ajet-runner` command line: one typer app; command groups live in service/commands/ and cli/worker.py."""

from __future__ import annotations

import typer

from cli import worker
from service.commands import catalogue, check, client, diagnose, results, run, serve, session_host

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


for module in (check, results, diagnose, run, worker, session_host, serve, client, catalogue):
    module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
