"""Failing: gather the facts about the failure and act on `ajet_runner.statemachine.fixes.failure.judge_failure`.

The facts: the plan (catalogue, hook or adviser), resolved against this experiment's config, command
and node (are any of its processes still running for a cleanup to stop; which GPUs are free), the
next attempt's inputs compared with every earlier attempt that failed for the same cause, and the
catalogue's backoff when the cause is transient.

A stop wins: requested before the repair is decided (or while the LLM adviser is asked, which aborts
the ask at once), the run ends `cancelled`, the failure recorded with no repair tried. The time limit
does the same with `timed_out`: reached here (an adviser's ask is aborted at the limit), no repair starts.
"""

from __future__ import annotations

import errno
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.failures.diagnose import decisive_line
from ajet_runner.statemachine.failures.failing_line import FailingCommand, failing_command
from ajet_runner.statemachine.failures.signatures import signature as catalogue_entry
from ajet_runner.statemachine.fixes.failure import RepairResult, Verdict, judge_failure, repeats_of
from ajet_runner.statemachine.fixes.gpu_check import GpuFacts, parse_visible, too_busy
from ajet_runner.statemachine.fixes.preflight import gang_shape
from ajet_runner.statemachine.fixes.repairs import ResolvedRepair, resolve_avoiding_repeats
from ajet_runner.statemachine.lifecycle import EventType, Trigger
from ajet_runner.statemachine.models import Finding
from ajet_runner.statemachine.rules import EXIT_NOT_RECORDED
from ajet_runner.statemachine.rules.time_limit import limit_at, time_up_reason
from ajet_runner.store.records import PendingRepair, RepairRecord
from ajet_runner.workers.executors.attempt import MARKER
from ajet_runner.workers.executors.local.procs import processes_with_marker
from ajet_runner.workers.repair.adviser import advice_fields, advice_source
from ajet_runner.workers.repair.attempt_inputs import earlier_failures, next_inputs
from ajet_runner.workers.repair.config_patch import read_yaml_data
from ajet_runner.workers.repair.gpus import launcher_skip_support, query_gpus
from ajet_runner.workers.repair.plan import plan_repair

if TYPE_CHECKING:
    from ajet_runner.statemachine.models import RepairAction
    from ajet_runner.workers.drive.seam import Drive


def handle(d: Drive) -> bool:
    d.renew()
    pending = d.ctx.pending_repair.as_dict() if d.ctx.pending_repair else {}
    cause = Finding.model_validate(pending["cause"]) if pending.get("cause") else None
    sig_id = cause.signature if cause else "unknown"
    explanation = cause.explanation if cause else str(pending.get("reason", d.lc.reason))
    record = RepairRecord(at=time.time(), attempt=d.lc.attempt, signature=sig_id,
                          explanation=explanation, log_excerpt=str(pending.get("log_excerpt", "")),
                          changes=[], diff="", source="none", result="", next="")
    if cause is not None and cause.signature == EXIT_NOT_RECORDED:
        _exit_not_recorded(d, record, cause)
        return True
    stop = threading.Event()
    d.journal.on_cancel = stop.set  # the journal's listener: a stop request aborts an ask in flight
    clock = _limit_clock(d, stop)
    try:
        if d.journal.cancel_requested():
            return _stopped(d, record, "before a repair was decided")
        if _time_up(d, record, "before a repair was decided"):
            return True
        return _judge(d, record, pending, cause, sig_id, stop)
    finally:
        d.journal.on_cancel = None
        if clock is not None:
            clock.cancel()


def _limit_clock(d: Drive, stop: threading.Event) -> threading.Timer | None:
    """A timer that sets `stop` when the time limit comes (the limit aborts an ask in flight too)."""
    left = limit_at(d.started_at, d.bp.exp_max_time_seconds) - time.time()
    if not left < float("inf"):  # no limit (or no start time yet)
        return None
    clock = threading.Timer(max(left, 0.0), stop.set)
    clock.daemon = True
    clock.start()
    return clock


@dataclass
class _Plan:
    """What planning decided for one failure: the actions, how they resolve against the earlier attempts,
    and the log line the outcome quotes. `record` is replaced when the adviser's fields join it."""

    record: RepairRecord
    actions: list[Any] = field(default_factory=list)
    resolved: ResolvedRepair | None = None
    identical_to: int | None = None
    backoff: float | None = None
    quote: str = ""
    why: str = ""


def _judge(d: Drive, record: RepairRecord, pending: dict[str, Any], cause: Finding | None, sig_id: str,
           stop: threading.Event) -> bool:
    launched = d.lc.attempt > 0 and bool(d.ctx.command)
    budget_left = d.lc.can(Trigger.repair, signature=sig_id)
    plan = _Plan(record)
    if launched:
        ended = _plan(d, plan, pending, cause, sig_id, stop, budget_left)
        if ended is not None:
            return ended
    else:
        record.explanation = d.lc.reason
    record, resolved = plan.record, plan.resolved
    verdict = judge_failure(launched=launched, signature=sig_id, planned=bool(plan.actions),
                            applicable=resolved is not None and resolved.applicable,
                            budget_left=budget_left, why=plan.why, quote=plan.quote,
                            rejection=d.lc.reason, identical_to=plan.identical_to, backoff=plan.backoff)
    if verdict.trigger == Trigger.repair and _time_up(d, record, "before the repair was applied"):
        return True
    _record_verdict(record, verdict, resolved)
    d.ctx.repairs.append(record)
    stat = (sig_id, verdict.result.value) if verdict.counted else None
    if verdict.trigger != Trigger.repair:
        d.fire(Trigger.give_up, _with_advice(verdict.reason, sig_id, launched), repair_stat=stat)
        return True
    assert resolved is not None
    _relaunch(d, pending, resolved, verdict, sig_id, stat)
    return True


def _plan(d: Drive, plan: _Plan, pending: dict[str, Any], cause: Finding | None, sig_id: str,
          stop: threading.Event, budget_left: bool) -> bool | None:
    """Fill `plan` from the catalogue, the hook or the adviser; the handler's result when a stop or the time
    limit came while planning (the run ends there), else None."""
    advise = advice_source(d.settings, bp=d.bp, ctx=d.ctx, pending=pending, publish=d.journal.publish,
                           budget_left=budget_left, cancelled=stop.is_set)
    plan.quote = decisive_line(cause, pending.get("log_tail") or [])  # the outcome line quotes the log
    plan.actions, source, plan.why = plan_repair(cause, pending, hook=d.settings.repair_hook, bp=d.bp,
                                                 attempt=d.lc.attempt, config_path=d.ctx.config_path,
                                                 advise=advise)
    if source == "adviser":
        plan.record = plan.record.model_copy(update=advice_fields(pending))
    if stop.is_set() or d.journal.cancel_requested():
        return _interrupted(d, plan.record, source)
    if plan.actions:
        failing = failing_command(d.ctx.command, pending.get("log_tail") or [], cause.text) if cause else None
        plan.resolved, plan.identical_to = _resolve(d, plan.actions, sig_id, failing)
        plan.backoff = _transient_backoff(d, sig_id, plan.resolved)
    plan.record.source = source
    return None


def _interrupted(d: Drive, record: RepairRecord, source: str) -> bool:
    """A stop (or the time limit) while the repair was being planned: the run ends here."""
    record.source = source
    when = "while the adviser was asked" if source == "adviser" else "before a repair was decided"
    if not d.journal.cancel_requested() and _time_up(d, record, when):
        return True
    return _stopped(d, record, when)


def _record_verdict(record: RepairRecord, verdict: Verdict, resolved: ResolvedRepair | None) -> None:
    """The verdict and, with a resolved repair, what was changed (or only considered: no relaunch)."""
    record.result = verdict.result
    record.identical_to = verdict.identical_to
    if resolved is None:
        return
    if verdict.trigger == Trigger.repair:
        record.changes, record.skipped = list(resolved.applied), list(resolved.skipped)
    else:  # nothing is applied when the run ends here: say what was considered
        record.skipped = [*resolved.skipped, *(f"not applied (no relaunch): {line}" for line in resolved.applied)]


def _relaunch(d: Drive, pending: dict[str, Any], resolved: ResolvedRepair, verdict: Verdict, sig_id: str,
              stat: tuple[str, str] | None) -> None:
    """Leave the resolved repair (and the wait before it) for the repairing state and fire `repair`."""
    repeat = verdict.identical_to is not None  # an unchanged relaunch of a transient cause
    wait = verdict.backoff if repeat else _wait_before_fix(d, sig_id)
    plan = {**resolved.model_dump(mode="json"), "backoff_seconds": wait, "repeat": repeat,
            "until": _until(sig_id) if repeat else None}
    d.ctx.pending_repair = PendingRepair.model_validate({**pending, "resolved": plan})
    reason = verdict.reason if repeat or not wait else f"{verdict.reason}; relaunching after {format_limit(wait)}"
    d.fire(Trigger.repair, reason, repair_stat=stat, signature=sig_id)


def _with_advice(reason: str, sig_id: str, launched: bool) -> str:
    """A give-up reason that ends with what to do when the cause persists (the catalogue's `if_it_persists`);
    for a busy GPU, which GPUs nvidia-smi shows busy now, against the launcher's rule for every GPU."""
    try:
        advice = catalogue_entry(sig_id).if_it_persists
    except KeyError:
        return reason
    if not advice or not launched:
        return reason
    if sig_id == "gpu_busy":
        listed, why = query_gpus()
        busy = too_busy(listed, [g.index for g in listed]) if listed else []
        now = f"; busy now: {'; '.join(busy)}" if busy else (f"; nvidia-smi: {why}" if why else "")
        reason += now
    return f"{reason}. What to do: {advice}"


def _resolve(d: Drive, actions: list[RepairAction], sig_id: str,
             failing: FailingCommand | None) -> tuple[ResolvedRepair, int | None]:
    """The plan against this experiment, avoiding a next attempt an earlier failed one already ran."""
    data = read_yaml_data(Path(d.ctx.config_path)) if d.ctx.config_path else {}
    earlier = earlier_failures(d.ctx, d.lc.attempt, sig_id)
    # Whether a process cleanup would find anything: only known for a run whose processes all live on
    # this host (not behind a session host, not a multi-node gang whose ranks run elsewhere).
    own = None if d.runner.remote() or d.gang is not None else bool(processes_with_marker(MARKER, d.id))
    gpus = _gpu_facts(d, data) if any(a.kind == "confine_gpus" for a in actions) else None

    def identical(resolved: ResolvedRepair) -> int | None:
        same = repeats_of(next_inputs(d.ctx, resolved), earlier, sig_id)
        return same[0] if same else None

    unreached = ("not changed: the launcher runs inside a script the runner does not rewrite, so its YAML copy "
                 "would not reach it" if d.ctx.launcher_hidden and not d.ctx.swarm else "")
    return resolve_avoiding_repeats(actions, identical=identical, yaml_data=data, command=d.ctx.command,
                                    env=d.ctx.env, installed=lambda prog: shutil.which(prog) is not None,
                                    own_processes=own, gpus=gpus, yaml_unreached=unreached, failing=failing)


def _transient_backoff(d: Drive, sig_id: str, resolved: ResolvedRepair) -> float | None:
    """The wait before an unchanged relaunch of a transient cause (None: not transient, or its waits
    are used up). The n-th repeat of the same inputs waits the catalogue's n-th backoff."""
    try:
        spec = catalogue_entry(sig_id).transient
    except KeyError:
        return None
    if spec is None:
        return None
    earlier = earlier_failures(d.ctx, d.lc.attempt, sig_id)
    repeats = len(repeats_of(next_inputs(d.ctx, resolved), earlier, sig_id))
    if repeats == 0 or repeats > len(spec.backoff_seconds):
        return None
    return spec.backoff_seconds[repeats - 1] * d.settings.repair_backoff_scale


def _wait_before_fix(d: Drive, sig_id: str) -> float:
    """The catalogue's wait before a relaunch WITH a fix (`before_every_relaunch`): the n-th failure of this
    cause waits the n-th backoff, the last one past the list; 0 for other causes."""
    try:
        spec = catalogue_entry(sig_id).transient
    except KeyError:
        return 0.0
    if spec is None or not spec.before_every_relaunch:
        return 0.0
    nth = sum(1 for r in d.ctx.repairs if r.signature == sig_id)  # this failure's record is in already
    return spec.backoff_seconds[min(max(nth, 1), len(spec.backoff_seconds)) - 1] * d.settings.repair_backoff_scale


def _until(sig_id: str) -> str | None:
    try:
        spec = catalogue_entry(sig_id).transient
    except KeyError:
        return None
    return spec.until if spec is not None else None


def _gpu_facts(d: Drive, data: dict[str, Any]) -> GpuFacts:
    """What `confine_gpus` needs: the node's GPUs for this run, or what nvidia-smi reports free."""
    nodes, per_node = gang_shape(data)
    supported, _ = launcher_skip_support(d.bp.exp_codebase_dir, d.bp.exp_venv_exe)
    assigned = list(d.ctx.gpus) if d.ctx.gpus is not None else None
    listed, why = (None, "") if assigned is not None else query_gpus()
    return GpuFacts(assigned=assigned, listed=listed, unavailable=why, needed=max(per_node, 1),
                    skip_flag=supported is not False, current=parse_visible(d.ctx.env.get("CUDA_VISIBLE_DEVICES")))


def _time_up(d: Drive, record: RepairRecord, when: str) -> bool:
    """The time limit reached in `failing`: the failure is recorded, no repair is tried, the run ends `timed_out`."""
    reason = time_up_reason(time.time(), d.started_at, d.bp.exp_max_time_seconds, when)
    if reason is None:
        return False
    record.next = f"no repair: {reason}"
    d.ctx.repairs.append(record)
    d.ctx.pending_repair = None
    d.fire(Trigger.time_up, reason)
    return True


def _stopped(d: Drive, record: RepairRecord, when: str) -> bool:
    """A stop request during failing: the failure is recorded, no repair is tried, the run is cancelled."""
    record.next = f"stopped: a stop request arrived {when}; no repair was tried"
    d.ctx.repairs.append(record)
    d.ctx.pending_repair = None
    d.fire(Trigger.cancel, f"stop requested {when}")
    return True


def _exit_not_recorded(d: Drive, record: RepairRecord, cause: Finding) -> None:
    """A full disk or a swapped result dir at the command's end: failed, counted as a result write
    failure, not repaired (a relaunch would meet the same disk or refusal)."""
    code = cause.text.split(" ", 1)[0]  # the finding's text starts with the errno name
    code = code if code in errno.errorcode.values() else "EIO"
    record.result = RepairResult.not_repairable
    d.ctx.repairs.append(record)
    path = str(d.handle.rc_path) if d.handle is not None else ""
    d.journal.publish({"type": EventType.result_write_failed, "errno": code, "path": path,
                       "message": cause.explanation})
    d.fire(Trigger.give_up, cause.explanation, write_failure=code,
           repair_stat=(EXIT_NOT_RECORDED, RepairResult.not_repairable.value))
