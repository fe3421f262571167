"""The research workflow's console scripts, so its skills' commands run unchanged against ajet-runner.

`alpha-run-blueprint --blueprint=P [--runner=ssh|pai] [--acknowledge-max-parallel-capacity=N]`,
`alpha-scan-jobs [--runner=…]` and `alpha-stop-jobs [--runner=…] --stop-job-id=ID [--stop-job-id=ID2]
[--delete]` take the real tools' flags and print their lines (`Job submitted: <id>`; one Python
dict per job; `Stopping job <id> ...` / `Deleted job <id>` / `Failed to stop <id>: <why>`). They are
`ajet-runner submit --blueprint`, `scan-jobs` and `stop-jobs` (ajet_runner.cli.commands.client_commands),
talking to the API named by AJET_RUNNER_URL / AJET_RUNNER_TOKEN (or `--url` / `--token`).

No `alpha_auto_research` module is installed: a package of that name in site-packages would
shadow (or be shadowed by) the workflow's own, so `python -m alpha_auto_research.…` lines are
rewritten to these scripts (docs/research-workflow.md). Installing ajet-runner into the same
environment as the workflow replaces its `alpha-*` scripts with these (the last install wins):
keep ajet-runner in its own environment when the workflow's own tools must stay reachable.
"""

from __future__ import annotations

import typer

from ajet_runner.cli.commands.client_commands import (
    RUNNER_HELP,
    TOKEN_OPTION,
    URL_OPTION,
    scan_jobs_drop_in,
    stop_jobs_drop_in,
    submit_drop_in,
)
from ajet_runner.cli.commands.output import USAGE, err
from ajet_runner.cli.startup import skip_unused_imports


def _app(name: str, help_text: str) -> typer.Typer:
    return typer.Typer(name=name, help=help_text, add_completion=False, pretty_exceptions_enable=False)


run_blueprint_app = _app("alpha-run-blueprint", "Submit a blueprint to ajet-runner: prints `Job submitted: <id>`.")
scan_jobs_app = _app("alpha-scan-jobs", "List ajet-runner's jobs, one Python dict per job.")
stop_jobs_app = _app("alpha-stop-jobs", "Stop ajet-runner jobs by id (always exit 0).")


@run_blueprint_app.command()
def run_blueprint(
    blueprint: list[str] = typer.Option(None, "--blueprint", help="the blueprint file (repeatable; - = stdin)",
                                        show_default=False),
    runner: str = typer.Option(None, "--runner", help=RUNNER_HELP, show_default=False),
    acknowledge: int = typer.Option(None, "--acknowledge-max-parallel-capacity", help="accepted for the research "
                                    "workflow; ignored: the workers' GPU slots bound parallel runs",
                                    show_default=False),
    url: str = URL_OPTION,
    token: str = TOKEN_OPTION,
) -> None:
    """Submit a blueprint: `Job submitted: <id>` (exit 1 when it is refused, with its problems on stderr)."""
    if not blueprint:
        err("error: give the blueprint: --blueprint=PATH")
        raise typer.Exit(USAGE)
    raise typer.Exit(submit_drop_in(blueprint, runner=runner, acknowledge=acknowledge, url=url, token=token))


@scan_jobs_app.command()
def scan_jobs(
    runner: str = typer.Option(None, "--runner", help=RUNNER_HELP, show_default=False),
    as_json: bool = typer.Option(False, "--json", help="a JSON list of the same dicts"),
    url: str = URL_OPTION,
    token: str = TOKEN_OPTION,
) -> None:
    """One Python dict per job: job_id, display_name, status (Queuing|Running|Succeeded|Failed|Stopped), create_time."""
    scan_jobs_drop_in(runner=runner, as_json=as_json, url=url, token=token)


@stop_jobs_app.command()
def stop_jobs(
    stop_job_id: list[str] = typer.Option(..., "--stop-job-id", help="a job id (repeatable)"),
    delete: bool = typer.Option(False, "--delete", help="also drop the records (result files are kept)"),
    runner: str = typer.Option(None, "--runner", help=RUNNER_HELP, show_default=False),
    url: str = URL_OPTION,
    token: str = TOKEN_OPTION,
) -> None:
    """`Stopping job <id> ...`, then `Deleted job <id>` with --delete, or `Failed to stop <id>: <why>`; exit 0."""
    raise typer.Exit(stop_jobs_drop_in(stop_job_id, delete=delete, runner=runner, as_json=False, url=url,
                                       token=token))


def run_blueprint_main() -> None:
    skip_unused_imports()
    run_blueprint_app()


def scan_jobs_main() -> None:
    skip_unused_imports()
    scan_jobs_app()


def stop_jobs_main() -> None:
    skip_unused_imports()
    stop_jobs_app()
