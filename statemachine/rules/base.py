"""What the watch loop sees, and what a rule may propose about it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ajet_runner.statemachine.models import Evaluation, Finding


@dataclass(frozen=True)
class Observation:
    """One look at a running attempt: process, log, results, clock, cancel flag."""

    now: float
    started_at: float  # when the experiment (not the attempt) started running
    attempt_started_at: float
    max_seconds: float | None
    process_alive: bool
    exit_code: int | None = None
    cancel_requested: bool = False
    last_output_at: float = 0.0
    last_eval_at: float | None = None
    completed_run: bool = False  # the log showed a successful end
    cause: Finding | None = None  # first fatal finding of this attempt's log
    cause_seen_at: float | None = None
    progress_after_cause: bool = False  # training steps were logged after the cause's line
    evaluations: Sequence[Evaluation] = field(default_factory=tuple)
    first_step_seen: bool = True  # a training step showed in this attempt's log (default: not watched)
    first_step_timeout: float | None = None  # the blueprint's own first-step timeout, seconds
    gang_problem: str | None = None  # a multi-node run: why a non-head rank is gone (None = all there)
    exit_record_error: str = ""  # why the ended command's exit code could not be recorded (ENOSPC, roots)
    server_alive: bool = True  # swarm mode: the swarm server still runs (True when there is none)
    server_cause: Finding | None = None  # swarm mode: the first fatal finding of the server's log
    server_last_line: str = ""  # swarm mode: the server log's last line (quoted when nothing matched)

    @property
    def elapsed(self) -> float:
        return max(0.0, self.now - self.started_at)


@dataclass(frozen=True)
class Proposal:
    """A rule's suggestion: fire `trigger` because `reason`. The machine has the last word."""

    trigger: str
    reason: str
    rule: str
    finding: Finding | None = None
    force_kill: bool = False  # the graceful stop already overran: kill now


class Rule(Protocol):
    """A watch rule. Rules are frozen dataclasses, so `name` is read-only here (a plain attribute in a
    Protocol would demand a settable one)."""

    @property
    def name(self) -> str: ...

    def check(self, obs: Observation) -> Proposal | None: ...
