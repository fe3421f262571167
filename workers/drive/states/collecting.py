"""Collecting: stop what is left, write the report files and `finish.flag` last, release GPUs and ports.
"""

from __future__ import annotations

import contextlib
import errno
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ajet_runner.resultdir.flag import atomic_write_bytes, remove_temp_files, write_error_reason
from ajet_runner.statemachine.lifecycle import EventType, Trigger
from ajet_runner.statemachine.logs.results import latest_metrics
from ajet_runner.statemachine.rules import EXIT_NOT_RECORDED
from ajet_runner.workers.drive import gang_steps as gang
from ajet_runner.workers.repair.advice_learning import learn_from_advice
from ajet_runner.workers.repair.config_patch import remove_patched_copy
from ajet_runner.workers.report import ReportData
from ajet_runner.workers.report.collect import link_repair_outcomes, report_data
from ajet_runner.workers.report.reserve import release_reserve
from ajet_runner.workers.report.result_files import finish_result_dir
from ajet_runner.workers.swarm.hooks import stop_ours

if TYPE_CHECKING:
    from ajet_runner.workers.drive.seam import Drive


def _where(d: Drive) -> dict[str, str]:
    """Where the attempts ran, for the report: the executor, the host or job, and how to attach."""
    h = d.handle
    name = h.executor if h is not None else d.runner.capabilities.name
    if h is None:
        return {"executor": name, "ran_on": "", "attach": ""}
    parts = [f"{name} executor"]
    if h.host:
        parts.append(f"host {h.host}")
    if h.job_id:
        parts.append(f"job {h.job_id}")
    parts.append(f"driven by the worker on node {d.node.name}")
    try:
        attach = d.runner.attach_command(h)
    except Exception:  # noqa: BLE001 - the report is written whatever an executor's helper says
        attach = ""
    return {"executor": name, "ran_on": ", ".join(parts), "attach": attach}


def handle(d: Drive) -> bool:
    if d.lc.attempt:
        d.renew()
    stopped = False
    if d.handle is not None and d.runner.is_running(d.handle):
        d.runner.stop(d.handle, d.settings.stop_grace_seconds)
        stopped = True
    # Scoped cleanup, once an attempt: the end of the watch (running) has already scanned the process table
    # for this attempt's leftovers, ~50-120 ms at load on the way to finish.flag (issue 39).
    if d.lc.attempt and (stopped or d.cleaned_attempt != d.lc.attempt):
        d.cleanup_processes()
    gang.finish(d)
    stop_ours(d.runner, d.ctx.swarm, d.settings.stop_grace_seconds, d.journal.publish)
    link_repair_outcomes(d.ctx, d.lc.outcome)
    advised = learn_from_advice(d.ctx, d.lc.outcome, exp_id=d.id,
                                suggestions_file=d.settings.suggestions_path())
    result_dir = d.bp.exp_result_dir

    made: list[ReportData] = []

    def make_data() -> ReportData:
        release_reserve(result_dir)  # the room kept since launch is for exactly these files
        _tidy_config_copy(d)  # before the report: it points at the kept copy
        made.append(report_data(d.id, d.bp, d.rec, d.lc, d.ctx, node=d.node.name,
                                watch=d.watch, started_at=d.started_at,
                                tmux_socket=d.runner.socket_path or d.settings.tmux_socket,
                                **_where(d)))
        return made[-1]

    # The plot drawn while the run was watched: pasted with its title if still exact, else drawn again —
    # after finish.flag, so only asked for then.
    failure = finish_result_dir(result_dir, d.id, d.lc.outcome, make_data, d.plot_ahead.background)
    _release_slots(d)
    metrics = latest_metrics(d.watch.summary) if d.watch else d.rec.latest_metrics
    best = {"best_metrics": made[-1].best} if made and made[-1].best else {}  # the report's: webhooks, /metrics
    with contextlib.suppress(OSError):
        remove_temp_files(result_dir)  # e.g. the wrapper's rc temp file when the disk was full
    if failure is not None:
        _result_write_failed(d, failure, metrics)
        return True
    d.fire(Trigger.collected, fields={"latest_metrics": metrics, **best}, advised=advised)  # keeps the outcome's reason
    return True


def _release_slots(d: Drive) -> None:
    """Give back the run's GPUs (a gang's on every node at once) and its swarm port."""
    if d.gang is not None:
        d.journal.call(d.gang.release)
    elif d.node.manages_gpus:
        d.journal.call(lambda: d.store.slots.release_gpus(d.node.name, d.id))
    if d.ctx.swarm and (port := d.swarm_port()) is not None:
        d.journal.call(lambda: d.store.slots.release_swarm_port(d.node.name, d.id, port))


def _result_write_failed(d: Drive, exc: OSError, metrics: Any) -> None:
    """An unwritable result dir (full disk, outside the roots) must not keep the experiment unfinished
    (re-adopted for ever), nor end it as anything but failed: recorded, counted, temp files removed."""
    why = write_error_reason(exc)
    code = errno.errorcode.get(exc.errno or 0, "") or type(exc).__name__
    d.journal.publish({"type": EventType.result_write_failed, "errno": code, "path": str(exc.filename or ""),
                       "message": f"could not write the result files: {why}"})
    counted = any(r.signature == EXIT_NOT_RECORDED for r in d.ctx.repairs)  # one count a run
    d.fire(Trigger.write_failed, f"result files not written: {why}", fields={"latest_metrics": metrics},
           write_failure="" if counted else code, previous_outcome=d.lc.outcome)


def _tidy_config_copy(d: Drive) -> None:
    """Keep the patched config in the result dir, and out of the user's codebase."""
    cfg = Path(d.ctx.config_path) if d.ctx.config_path else None
    if cfg and cfg != Path(d.bp.yaml_abspath()) and cfg.exists():
        kept = Path(d.bp.exp_result_dir) / "config.patched.yaml"
        atomic_write_bytes(kept, cfg.read_bytes())
        remove_patched_copy(cfg)
        d.ctx.config_path = str(kept)  # the report's "YAML (as run)" points at the kept copy
