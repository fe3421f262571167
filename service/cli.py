"""`ajet-runner` command line: one typer app; each command group lives in service/commands/."""

from __future__ import annotations

import typer

from service.commands import check, client, diagnose, results, run, serve, session_host, worker

app = typer.Typer(
    name="ajet-runner",
    help="Run AgentJet experiment blueprints: tmux, watching, repairs, reports, finish.flag.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Run AgentJet experiment blueprints: tmux, watching, repairs, reports, finish.flag."""


for module in (check, results, diagnose, run, worker, session_host, serve, client):
    module.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
