"""Repairing: apply the resolved fix (a transient cause's wait, env, command, the YAML copy with the
experiment name pinned so the trainer resumes, cleanups), record what each step did, then relaunch.

The experiment's time limit holds here too: a wait ends at the limit and the run ends `timed_out`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ajet_runner.statemachine.durations import format_duration, format_limit
from ajet_runner.statemachine.fixes.gpu_check import SKIP_FLAG, describe, parse_visible, too_busy
from ajet_runner.statemachine.fixes.preflight import launch_workdir
from ajet_runner.statemachine.fixes.repairs import PROCESS_CLEANUPS
from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.rules.time_limit import limit_at, time_up_reason
from ajet_runner.statemachine.shell import command as cmdlib
from ajet_runner.workers.repair.gpus import query_gpus
from ajet_runner.workers.repair.resume import pin_experiment_name
from ajet_runner.workers.swarm.hooks import stop_ours

if TYPE_CHECKING:
    from ajet_runner.store.records import RepairRecord
    from ajet_runner.workers.drive.seam import Drive

GPU_POLL_SECONDS = 5.0


def handle(d: Drive) -> bool:
    d.renew()
    resolved = (d.ctx.pending_repair.resolved if d.ctx.pending_repair else None) or {}
    record = d.ctx.repairs[-1] if d.ctx.repairs else None
    wait = float(resolved.get("backoff_seconds") or 0.0)
    if (resolved.get("repeat") or wait > 0) and _back_off(d, resolved, record, wait):
        d.fire(Trigger.cancel, "stop requested")
        return True
    if _timed_out(d, record, "while waiting to relaunch" if wait > 0 else "before the relaunch"):
        return True
    _apply_fix(d, resolved, record)
    d.ctx.pending_repair = None
    d.fire(Trigger.relaunch, f"fix applied; attempt {d.lc.attempt + 1}")
    return True  # what the relaunch led to is linked when collecting (link_repair_outcomes)


def _apply_fix(d: Drive, resolved: dict[str, Any], record: RepairRecord | None) -> None:
    """The fix's environment, command, YAML changes and cleanups; the YAML diff goes on the failure's record."""
    d.ctx.env.update(resolved.get("env") or {})
    d.ctx.command = resolved.get("command") or d.ctx.command
    diff = d.patch_config(_yaml_changes(d, resolved, record))
    cleanups = list(resolved.get("cleanups") or [])
    _clean_up(d, record, cleanups)
    d.ctx.cleanups_done = cleanups
    if record is not None:
        record.diff = diff


def _note(record: RepairRecord | None, line: str) -> None:
    """A line of what the repair did, in the failure's record."""
    if line and record is not None:
        record.changes.append(line)


def _back_off(d: Drive, resolved: dict[str, Any], record: RepairRecord | None, wait: float) -> bool:
    """Wait before the relaunch (a backoff, or for the GPUs to free); True when a stop ended the wait."""
    known = _gpus_checked(d, resolved)
    then = "relaunching unchanged" if resolved.get("repeat") else "relaunching with the fix"
    line, ended = _wait(d, wait, resolved.get("until"), known, limit_at(d.started_at, d.bp.exp_max_time_seconds),
                        then)
    _note(record, line)
    if record is not None:
        record.backoff_seconds = wait
    return ended == "cancel"


def _yaml_changes(d: Drive, resolved: dict[str, Any], record: RepairRecord | None) -> list[dict[str, Any]]:
    """The repair's YAML changes, with the experiment name pinned (a resume must find its checkpoints)."""
    changes: list[dict[str, Any]] = list(resolved.get("yaml_changes") or [])
    if not d.ctx.swarm and not d.ctx.launcher_hidden:  # a pin in a copy the script never reads is no pin
        pin, line = pin_experiment_name(d.ctx, launch_workdir(d.bp, d.ctx.command))
        if pin is not None:
            changes.append(pin.model_dump(mode="json"))
        _note(record, line)
    return changes


def _clean_up(d: Drive, record: RepairRecord | None, cleanups: list[str]) -> None:
    """Stop our swarm server and this experiment's processes, as the plan says."""
    if "swarm_server" in cleanups:
        stop_ours(d.runner, d.ctx.swarm, d.settings.stop_grace_seconds, d.journal.publish)
    if not any(c in PROCESS_CLEANUPS for c in cleanups):
        return
    killed = d.cleanup_processes()  # every cleanup kind is scoped to this experiment's processes
    if record is not None:
        _record_cleanup(record, cleanups, killed)


def _record_cleanup(record: RepairRecord, cleanups: list[str], killed: list[int]) -> None:
    """The plan's "clean up …" lines become what the cleanup did (one line, where the first of them was)."""
    planned = [c for c in record.changes if c.startswith(tuple(f"clean up {k} " for k in PROCESS_CLEANUPS))]
    at = record.changes.index(planned[0]) if planned else len(record.changes)
    record.changes = [c for c in record.changes if c not in planned]
    record.changes.insert(at, _cleanup_line(cleanups, killed))


def _gpus_checked(d: Drive, resolved: dict[str, Any]) -> list[int] | None:
    """The GPUs the next launch's GPU check looks at: the run's own when its command skips the launcher's check
    (the runner checks those), else None — the launcher checks every GPU nvidia-smi lists, whatever
    CUDA_VISIBLE_DEVICES says (agentjet 0.0.1 has no --skip-check-avail-gpu, and without --autokill it checks)."""
    command = resolved.get("command") or d.ctx.command
    if not cmdlib.has_launcher(command) or not cmdlib.has_flag(command, SKIP_FLAG):
        return None
    if d.ctx.gpus is not None:
        return list(d.ctx.gpus)
    return parse_visible({**d.ctx.env, **(resolved.get("env") or {})}.get("CUDA_VISIBLE_DEVICES"))


def _timed_out(d: Drive, record: Any, where: str) -> bool:
    """The time limit reached in `repairing`: no relaunch; the run ends `timed_out` (and says so in the log)."""
    reason = time_up_reason(time.time(), d.started_at, d.bp.exp_max_time_seconds, where)
    if reason is None:
        return False
    if record is not None:
        record.next = f"no relaunch: {reason}"
    d.ctx.pending_repair = None
    d.fire(Trigger.time_up, reason)
    return True


def _cleanup_line(cleanups: list[str], killed: list[int]) -> str:
    what = ", ".join(c for c in cleanups if c in PROCESS_CLEANUPS)
    if killed:
        shown = ", ".join(str(p) for p in killed[:20]) + (" …" if len(killed) > 20 else "")
        return f"cleanup ({what}): stopped {len(killed)} process(es) of this experiment (pids {shown})"
    return f"cleanup ({what}): no process of this experiment was left to stop"


def _wait(d: Drive, seconds: float, until: str | None, known: list[int] | None,
          limit: float, then: str) -> tuple[str, str]:
    """Wait before an unchanged relaunch of a transient cause; `gpus_free` ends it early once the run's
    GPUs (`known`; else every GPU nvidia-smi lists, as the launcher checks) are at least 95 % free.
    The experiment's time limit (`limit`, wall clock) ends it too.
    Returns the repair-log line and what ended it early ("cancel", "time_up" or "")."""
    start = time.monotonic()
    deadline = start + seconds
    seen = ""
    busy: list[str] = []
    next_look = start
    while True:
        d.renew()
        if d.journal.cancel_requested():
            waited = format_duration(time.monotonic() - start)
            return f"waited {waited} for the transient cause; a stop was requested", "cancel"
        now = time.monotonic()
        if time.time() >= limit:
            tail = f" (nvidia-smi: {seen})" if seen else ""
            return (f"waited {format_duration(now - start)} of {format_limit(seconds)} for the transient cause"
                    f"{tail}; the experiment's time limit was reached"), "time_up"
        if until == "gpus_free" and now >= next_look:
            seen, busy, free = _look_at_gpus(known, now - start, then)
            if free:
                return free, ""
            next_look = now + GPU_POLL_SECONDS
        if now >= deadline:
            break
        time.sleep(max(0.0, min(1.0, deadline - now, max(next_look - now, 0.05), limit - time.time())))
    return _backoff_line(seconds, until, seen, busy, then), ""


def _look_at_gpus(known: list[int] | None, waited: float, then: str) -> tuple[str, list[str], str]:
    """One nvidia-smi look while waiting for `gpus_free`: what it showed, the GPUs still busy, and the
    repair-log line when every wanted GPU is free now ("" while the wait goes on)."""
    listed, why = query_gpus()
    seen = describe(listed, known) if listed is not None else why
    wanted = known if known is not None else [g.index for g in listed or []]
    busy = too_busy(listed, wanted) if listed else []
    if not listed or busy:
        return seen, busy, ""
    which = f"GPU(s) {','.join(map(str, wanted))} are" if known is not None else "every GPU is"
    return seen, busy, (f"waited {format_duration(waited)}: {which} at least 95 % free now (nvidia-smi: {seen}); "
                        f"{then}")


def _backoff_line(seconds: float, until: str | None, seen: str, busy: list[str], then: str) -> str:
    """The repair-log line of a backoff that ran its full length (with what nvidia-smi last showed)."""
    tail = f"; nvidia-smi still shows {seen}" if until == "gpus_free" and seen else ""
    if until == "gpus_free" and busy:
        tail = f"; still busy: {'; '.join(busy)} (nvidia-smi: {seen})"
    return f"waited {format_limit(seconds)} (the catalogue's backoff for a transient cause){tail}; {then}"

