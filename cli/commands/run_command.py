"""`ajet-runner run BLUEPRINT`: the whole job on one machine.

Without REDIS_URL it starts a private redis-server, runs this node's worker, submits the
blueprint, follows it live and exits 0 (completed / early_stopped), 1 (failed / timed_out, or the
blueprint was rejected), 2 (it cannot be read) or 130 (cancelled with Ctrl-C).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from ajet_runner.cli.commands import output
from ajet_runner.cli.commands.local_worker import start_local_worker, stop_local, wait_for_node
from ajet_runner.cli.commands.start_checks import check_adviser, install_site_catalogue
from ajet_runner.store.clients import RedisSettingsError, RedisTarget, check_reachable, target_from
from ajet_runner.store.settings import get_settings

EXIT_CODES = {"completed": 0, "early_stopped": 0, "failed": 1, "timed_out": 1, "cancelled": 130}


def run_blueprint(path: Path, console: Console, node: str = "", redis_url: str = "",
                  show_worker_log: bool = False) -> int:
    settings = get_settings()
    text = _read_blueprint(path)
    if text is None:
        return output.USAGE
    redis = _redis(redis_url, settings, console)
    if redis is None:
        return output.USAGE
    target, embedded = redis
    node = node or settings.node
    worker = start_local_worker({**os.environ, **target.env()}, node,
                                quiet=bool(embedded) and not show_worker_log)
    # Imported once the worker is starting (its start-up is what `run` waits for first): the Store, the
    # submission's parser and checks (issue 39).
    from ajet_runner.service.submit import SubmissionRejected, submit
    from ajet_runner.store.store import Store
    from ajet_runner.workers.executors.ssh_hosts import unknown_host

    store = Store.from_url(target)
    try:
        try:
            wait_for_node(store, node, worker)
        except RuntimeError as exc:
            output.err(f"error: the local worker did not start: {exc}")
            return output.FAILED
        try:
            rec = submit(store, text, blueprint_path="" if str(path) == "-" else str(path.resolve()),
                         node=node, host_check=lambda host: unknown_host(host, settings.ssh_config))
        except SubmissionRejected as exc:
            output.err(f"error: blueprint rejected: {path}")
            for p in exc.problems:
                output.err(f"  {p.level.value} {p.field}: {p.message}")
            if exc.report_dir:
                output.err(f"report: {Path(exc.report_dir) / 'experiment_report.md'} (finish.flag: failed)")
            return output.FAILED  # refused, as `submit` and `check` say it (exit 2 is for unreadable input)
        console.print(f"Job submitted: {rec['id']}")
        # lines to copy: never wrapped, never styled
        console.print(f"  watch it in tmux: {_attach_line(settings, text, rec['tmux_session'])}",
                      soft_wrap=True, highlight=False, markup=False)
        console.print(f"  result dir: {rec['result_dir']}", soft_wrap=True, highlight=False, markup=False)
        return _follow_to_end(store, rec["id"], console)
    finally:
        stop_local(worker, store, embedded)


def _redis(redis_url: str, settings: Any, console: Console) -> tuple[RedisTarget, Any] | None:
    """The Redis to use and the embedded one started when none is configured (else None with it); None when
    the settings are refused (said on stderr): REDIS_URL or the sentinels, mixed or broken settings are
    never replaced by an embedded one."""
    from ajet_runner.service.embedded import EmbeddedRedis

    try:
        target = RedisTarget(url=redis_url) if redis_url else target_from(settings)
        if target is not None:
            check_reachable(target)
    except RedisSettingsError as exc:
        output.err(f"error: {exc}")
        return None
    if target is not None:
        return target, None
    embedded = EmbeddedRedis(private=True).start()  # a unix socket only this user reaches, with a password
    console.print(f"embedded Redis at {embedded.shown}")
    return RedisTarget(url=embedded.url), embedded


def _read_blueprint(path: Path) -> str | None:
    """The blueprint's text (`-`: stdin); None when it cannot be read (said on stderr)."""
    try:
        return sys.stdin.read() if str(path) == "-" else path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        output.err(f"error: cannot read blueprint {path}: {why}")
        return None


def _follow_to_end(store: Any, exp_id: str, console: Console) -> int:
    """Show the run's events until it ends (Ctrl-C asks it to stop), then its outcome and report; the exit code."""
    from ajet_runner.cli.commands.follow import follow

    def poll(after: str) -> tuple[dict[str, Any] | None, list[dict[str, Any]], str]:
        events = store.events.read(exp_id, after=after, block_ms=500)
        return store.records.raw(exp_id), events, events[-1]["event_id"] if events else after

    final = follow(poll, console, on_interrupt=lambda: store.runs.request_cancel(exp_id))
    outcome = final.get("outcome", "")
    console.print(f"[bold]{outcome}[/]: {escape(str(final.get('reason') or ''))}")
    console.print(f"report: {Path(final['result_dir']) / 'experiment_report.md'}", soft_wrap=True,
                  highlight=False, markup=False)
    return EXIT_CODES.get(outcome, 1)


def _attach_line(settings: Any, text: str, session: str) -> str:
    """The tmux attach line: on the ssh host the blueprint names (it runs there), else here."""
    from ajet_runner.statemachine.blueprint.parse import parse_blueprint

    host = parse_blueprint(text).exp_host
    if host:
        from ajet_runner.workers.executors.ssh import attach_line

        return f"{attach_line(settings, host, session)}  (it runs on ssh host {host})"
    return f"tmux{_socket_flag(settings)} attach -t {session}"


def _socket_flag(settings: Any) -> str:
    return f" -S {settings.tmux_socket}" if settings.tmux_socket else ""


def _setup_logs(log_level: str, log_format: str) -> bool:
    """Configure this process's logs (exported to the local worker); True when its log is to be shown."""
    from ajet_runner.logsetup import LEVEL_ENV, LogSetupError, configure

    shown = bool(log_level or os.environ.get(LEVEL_ENV))
    try:
        configure("run", log_level, log_format)
    except LogSetupError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    return shown


def register(app: typer.Typer) -> None:
    @app.command(epilog="Example: ajet-runner run blueprint_1.md (Ctrl-C stops it and writes its report)")
    def run(
        blueprint: Path = typer.Argument(..., help="the blueprint markdown file (- reads it from stdin)"),
        node: str = typer.Option("", help="node name for the local worker",
                                 show_default="$AJET_RUNNER_NODE or the hostname"),
        log_level: str = typer.Option("", help="show the local worker's log at this level "
                                      "(debug, info, ...; default $AJET_RUNNER_LOG_LEVEL, log hidden)"),
        log_format: str = typer.Option("", help="text or json", show_default="$AJET_RUNNER_LOG_FORMAT, else text"),
        executor: str = typer.Option("", help="where the attempts run: local, ssh (the host the blueprint names) or "
                                     "slurm (a batch job)", show_default="$AJET_RUNNER_EXECUTOR, else local"),
        partition: str = typer.Option("", help="SLURM partition (with --executor slurm)"),
        sbatch_arg: list[str] = typer.Option([], "--sbatch-arg", help="one more sbatch argument (repeat for more)"),
    ) -> None:
        """Run one blueprint end to end on this machine (embedded Redis unless REDIS_URL or the sentinels are set)."""
        from ajet_runner.cli.commands.worker_command import export_executor_options

        export_executor_options(executor, [], partition, sbatch_arg)
        shown = _setup_logs(log_level, log_format)
        check_adviser("run")
        install_site_catalogue("run")  # a bad site catalogue is reported here, not by the hidden worker
        code = run_blueprint(blueprint, output.console(), node=node, show_worker_log=shown)
        raise typer.Exit(code)

    from ajet_runner.service.demo import list_templates

    @app.command(epilog="Example: ajet-runner demo oom_first_attempt")
    def demo(
        template: str = typer.Argument("demo", help="the sample blueprint to run, one of: "
                                       + ", ".join(list_templates())),
        workdir: Path = typer.Option(None, "--dir", help="where to put the copy",
                                     show_default="./runs/TEMPLATE-TIME"),
        log_level: str = typer.Option("", help="show the local worker's log at this level (as for `run`)"),
        log_format: str = typer.Option("", help="text or json", show_default="$AJET_RUNNER_LOG_FORMAT, else text"),
    ) -> None:
        """Copy the simulated AgentJet and a sample blueprint into a fresh dir, then `run` it."""
        from ajet_runner.service.demo import materialize

        shown = _setup_logs(log_level, log_format)

        if template not in list_templates():
            typer.echo(f"error: no sample blueprint {template!r}; choose from {', '.join(list_templates())}", err=True)
            raise typer.Exit(2)
        target = workdir or Path("runs") / f"{template}-{time.strftime('%Y%m%d-%H%M%S')}"
        blueprint = materialize(template, target.resolve())
        out = output.console()
        out.print(f"blueprint: {blueprint}", soft_wrap=True, highlight=False, markup=False)
        raise typer.Exit(run_blueprint(blueprint, out, show_worker_log=shown))
