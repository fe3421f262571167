"""What a failed attempt means: give up (and why) or repair and relaunch. Pure; the driver gathers the
facts (was anything launched, is there a plan, would it change anything, is budget left) and acts on
the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class RepairResult(str, Enum):
    """What the runner did about one failure (a repair record's `result`)."""

    relaunched = "relaunched"
    not_repairable = "not repairable"
    no_applicable_change = "no applicable change"
    budget_spent = "budget spent"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Verdict:
    trigger: str  # "give_up" or "repair" (lifecycle triggers)
    result: RepairResult
    reason: str  # the transition's reason (shown as the experiment's reason)
    counted: bool  # counts in ajet_runner_repairs_total{signature, result}


def judge_failure(*, launched: bool, signature: str, planned: bool, applicable: bool, budget_left: bool,
                  why: str = "", quote: str = "", rejection: str = "") -> Verdict:
    """The verdict on one failure, in order: never launched (a preflight rejection) → not repairable;
    no plan → not repairable; a plan that changes nothing → no applicable change; no repair budget left
    → budget spent; else relaunch with the fix. `quote` is the log line the reason quotes."""
    if not launched:
        return Verdict("give_up", RepairResult.not_repairable, rejection or "rejected by preflight", counted=False)
    quoted = f" — {quote}" if quote else ""
    if not planned or not applicable:
        result = RepairResult.no_applicable_change if planned else RepairResult.not_repairable
        return Verdict("give_up", result, f"{signature}: {why or result.value}{quoted}", counted=True)
    if not budget_left:
        return Verdict("give_up", RepairResult.budget_spent, f"{signature}: repair budget spent{quoted}", counted=True)
    return Verdict("repair", RepairResult.relaunched, f"{signature}: {why}", counted=True)
