"""What a failed attempt means: give up (and why) or repair and relaunch. Pure; the driver gathers the
facts (was anything launched, is there a plan, would it change anything, is budget left, did an earlier
attempt already run exactly what the next one would run) and acts on the verdict.

"No identical relaunch" is decided here, in one place: the next attempt's inputs (the effective
command, the YAML's content, the variables the runner sets, the cleanups done just before it) are
compared with every earlier attempt that failed for the same cause. Equal means the relaunch would
fail the same way, so the run ends `failed` naming that attempt — unless the catalogue declares the
cause transient (a network outage, a GPU busy with someone else's job) and a backoff is left.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import BaseModel, Field

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.lifecycle import Trigger

__all__ = ["AttemptInputs", "EarlierAttempt", "RepairResult", "Verdict", "identical_attempt", "judge_failure",
           "repeats_of", "yaml_digest"]

PINNED_KEY = ("ajet", "experiment_name")  # left out of the YAML digest: see yaml_digest


class RepairResult(str, Enum):
    """What the runner did about one failure (a repair record's `result`)."""

    relaunched = "relaunched"
    not_repairable = "not repairable"
    no_applicable_change = "no applicable change"
    budget_spent = "budget spent"
    # A relaunch was decided but never came: the time limit or a stop ended the wait, or the launch was refused.
    not_relaunched = "not relaunched"

    def __str__(self) -> str:
        return self.value


def yaml_digest(data: Mapping[str, Any] | None) -> str:
    """A short digest of a YAML's data (not its text: comments and quoting do not change a run).

    `ajet.experiment_name` is left out: the runner pins it on a relaunch only to keep the name the
    earlier attempt already used (so verl resumes), which is not a change of what runs.
    """
    plain: dict[str, Any] = dict(data or {})
    ajet = plain.get(PINNED_KEY[0])
    if isinstance(ajet, Mapping) and PINNED_KEY[1] in ajet:
        plain[PINNED_KEY[0]] = {k: v for k, v in ajet.items() if k != PINNED_KEY[1]}
    text = json.dumps(plain, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class AttemptInputs(BaseModel):
    """What one attempt ran with, as far as the runner decides it."""

    command: str = ""
    yaml_digest: str = ""
    env: dict[str, str] = Field(default_factory=dict)  # the variables the runner sets (not the node's)
    cleanups: list[str] = Field(default_factory=list)  # done just before the attempt started

    def same_as(self, other: AttemptInputs) -> bool:
        return (self.command == other.command and self.yaml_digest == other.yaml_digest
                and self.env == other.env and sorted(set(self.cleanups)) == sorted(set(other.cleanups)))


@dataclass(frozen=True)
class EarlierAttempt:
    """An attempt that ended in failure: its number, the cause it was diagnosed with, its inputs."""

    number: int
    signature: str
    inputs: AttemptInputs


def repeats_of(next_inputs: AttemptInputs, earlier: Iterable[EarlierAttempt], signature: str) -> list[int]:
    """The earlier attempts that failed for `signature` with exactly these inputs, in order."""
    return [a.number for a in earlier if a.signature == signature and a.inputs.same_as(next_inputs)]


def identical_attempt(next_inputs: AttemptInputs, earlier: Iterable[EarlierAttempt], signature: str) -> int | None:
    """The first earlier attempt that already ran exactly this and failed for the same cause, if any."""
    same = repeats_of(next_inputs, earlier, signature)
    return same[0] if same else None


@dataclass(frozen=True)
class Verdict:
    trigger: Trigger  # give_up or repair
    result: RepairResult
    reason: str  # the transition's reason (shown as the experiment's reason)
    counted: bool  # counts in ajet_runner_repairs_total{signature, result}
    backoff: float = 0.0  # seconds to wait before an unchanged relaunch of a transient cause
    identical_to: int | None = None  # the earlier attempt the next one would repeat


def judge_failure(*, launched: bool, signature: str, planned: bool, applicable: bool, budget_left: bool,
                  why: str = "", quote: str = "", rejection: str = "", identical_to: int | None = None,
                  backoff: float | None = None) -> Verdict:
    """The verdict on one failure, in order: never launched (a preflight rejection) → not repairable;
    no plan → not repairable; a next attempt identical to an earlier one that failed the same way (or a
    plan that changes nothing) → no applicable change, unless the cause is transient and `backoff` (the
    wait before this repeat) is left; no repair budget left → budget spent; else relaunch with the fix.
    `quote` is the log line the reason quotes."""
    if not launched:
        return Verdict(Trigger.give_up, RepairResult.not_repairable, rejection or "rejected by preflight",
                       counted=False)
    quoted = f" — {quote}" if quote else ""
    if not planned:
        return Verdict(Trigger.give_up, RepairResult.not_repairable,
                       f"{signature}: {why or RepairResult.not_repairable.value}{quoted}", counted=True)
    return _judge_plan(signature, quoted, why=why, applicable=applicable, budget_left=budget_left,
                       identical_to=identical_to, backoff=backoff)


def _judge_plan(signature: str, quoted: str, *, why: str, applicable: bool, budget_left: bool,
                identical_to: int | None, backoff: float | None) -> Verdict:
    """The verdict on a launched failure that has a repair plan (`judge_failure`'s last three steps)."""
    repeat = identical_to is not None or not applicable
    if repeat and backoff is None:
        text = _no_change_text(identical_to, why)
        return Verdict(Trigger.give_up, RepairResult.no_applicable_change, f"{signature}: {text}{quoted}", counted=True,
                       identical_to=identical_to)
    if not budget_left:
        return Verdict(Trigger.give_up, RepairResult.budget_spent, f"{signature}: repair budget spent{quoted}",
                       counted=True, identical_to=identical_to)
    if repeat:
        same = f" as attempt {identical_to} did" if identical_to is not None else ""
        return Verdict(Trigger.repair, RepairResult.relaunched,
                       f"{signature}: transient; relaunching unchanged{same} after {format_limit(backoff)}",
                       counted=True, backoff=float(backoff or 0.0), identical_to=identical_to)
    return Verdict(Trigger.repair, RepairResult.relaunched, f"{signature}: {why}", counted=True)


def _no_change_text(identical_to: int | None, why: str) -> str:
    """Why a repeat is given up: an identical earlier attempt failed the same way, or the plan changes nothing."""
    if identical_to is not None:
        return (f"attempt {identical_to} already ran exactly this (same command, YAML and environment) "
                "and failed the same way")
    return why or RepairResult.no_applicable_change.value
