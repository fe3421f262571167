"""Failing: gather the facts about the failure and act on `ajet_runner.statemachine.failure.judge_failure`.

A stop wins: requested before the repair is decided (or while the LLM adviser is asked, which aborts
the ask at once), the run ends `cancelled`, the failure recorded with no repair tried.
"""

from __future__ import annotations

import errno
import shutil
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ajet_runner.statemachine.diagnose import decisive_line
from ajet_runner.statemachine.failure import RepairResult, judge_failure
from ajet_runner.statemachine.models import Finding
from ajet_runner.statemachine.repairs import resolve_repair
from ajet_runner.statemachine.rules import EXIT_NOT_RECORDED
from ajet_runner.store.records import PendingRepair, RepairRecord
from ajet_runner.workers.repair.adviser import advice_fields, advice_source
from ajet_runner.workers.repair.config_patch import read_yaml_data
from ajet_runner.workers.repair.plan import plan_repair

if TYPE_CHECKING:
    from ajet_runner.workers.drive.driver import ExperimentDriver


def handle(d: ExperimentDriver) -> bool:
    d._renew()
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
    try:
        if d.journal.cancel_requested():
            return _stopped(d, record, "before a repair was decided")
        return _judge(d, record, pending, cause, sig_id, stop)
    finally:
        d.journal.on_cancel = None


def _judge(d: ExperimentDriver, record: RepairRecord, pending: dict[str, Any], cause: Finding | None, sig_id: str,
           stop: threading.Event) -> bool:
    launched = d.lc.attempt > 0 and bool(d.ctx.command)
    actions: list[Any] = []
    resolved = None
    quote, why = "", ""
    if launched:
        advise = advice_source(d.settings, bp=d.bp, ctx=d.ctx, pending=pending, publish=d.journal.publish,
                               budget_left=d.lc.can("repair", signature=sig_id), cancelled=stop.is_set)
        quote = decisive_line(cause, pending.get("log_tail") or [])  # the outcome line quotes the log
        actions, source, why = plan_repair(cause, pending, hook=d.settings.repair_hook, bp=d.bp,
                                           attempt=d.lc.attempt, config_path=d.ctx.config_path,
                                           advise=advise)
        if source == "adviser":
            record = record.model_copy(update=advice_fields(pending))
        if stop.is_set() or d.journal.cancel_requested():
            record.source = source
            return _stopped(d, record, "while the adviser was asked" if source == "adviser"
                            else "before a repair was decided")
        if actions:
            data = read_yaml_data(Path(d.ctx.config_path)) if d.ctx.config_path else {}
            resolved = resolve_repair(actions, yaml_data=data, command=d.ctx.command, env=d.ctx.env,
                                      installed=lambda prog: shutil.which(prog) is not None)
        record.source = source
    else:
        record.explanation = d.lc.reason
    verdict = judge_failure(launched=launched, signature=sig_id, planned=bool(actions),
                            applicable=resolved is not None and resolved.applicable,
                            budget_left=d.lc.can("repair", signature=sig_id), why=why, quote=quote,
                            rejection=d.lc.reason)
    record.result = verdict.result
    if resolved is not None and verdict.result != RepairResult.budget_spent:
        record.changes = list(resolved.notes)
    d.ctx.repairs.append(record)
    stat = (sig_id, verdict.result.value) if verdict.counted else None
    if verdict.trigger == "repair":
        assert resolved is not None
        d.ctx.pending_repair = PendingRepair.model_validate({**pending,
                                                             "resolved": resolved.model_dump(mode="json")})
        d.fire("repair", verdict.reason, repair_stat=stat, signature=sig_id)
    else:
        d.fire("give_up", verdict.reason, repair_stat=stat)
    return True


def _stopped(d: ExperimentDriver, record: RepairRecord, when: str) -> bool:
    """A stop request during failing: the failure is recorded, no repair is tried, the run is cancelled."""
    record.next = f"stopped: a stop request arrived {when}; no repair was tried"
    d.ctx.repairs.append(record)
    d.ctx.pending_repair = None
    d.fire("cancel", f"stop requested {when}")
    return True


def _exit_not_recorded(d: ExperimentDriver, record: RepairRecord, cause: Finding) -> None:
    """A full disk or a swapped result dir at the command's end: failed, counted as a result write
    failure, not repaired (a relaunch would meet the same disk or refusal)."""
    code = cause.text.split(" ", 1)[0]  # the finding's text starts with the errno name
    code = code if code in errno.errorcode.values() else "EIO"
    record.result = RepairResult.not_repairable
    d.ctx.repairs.append(record)
    path = str(d.handle.rc_path) if d.handle is not None else ""
    d.journal.publish({"type": "result_write_failed", "errno": code, "path": path, "message": cause.explanation})
    d.fire("give_up", cause.explanation, write_failure=code,
           repair_stat=(EXIT_NOT_RECORDED, RepairResult.not_repairable.value))
