"""`ajet-runner` command line: one typer app; its command groups live in cli/commands/.

The root group is lazy (cli/lazy.py): a command's module is imported only when that command runs, so
`--help` and the light commands start in a fraction of the time importing all of them took.
"""

from __future__ import annotations

import typer

from ajet_runner.cli.lazy import LazyGroup

app = typer.Typer(
    name="ajet-runner",
    cls=LazyGroup,
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


def main() -> None:
    from ajet_runner.cli.commands.help_text import tidy
    from ajet_runner.cli.startup import skip_unused_imports
    from ajet_runner.workers.node.lifeline import keep_environment_private

    keep_environment_private()  # the control plane's keys in this environment stay out of experiments' reach
    skip_unused_imports()

    tidy(typer.main.get_command(app))(prog_name="ajet-runner")


if __name__ == "__main__":
    main()
