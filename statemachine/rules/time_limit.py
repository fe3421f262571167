"""`exp_max_time` is a hard promise: stop gracefully at the limit, kill after the grace period."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.policies import time_limit_phase
from ajet_runner.statemachine.rules.base import Observation, Proposal


@dataclass(frozen=True)
class TimeLimitRule:
    grace: float = 60.0
    name: str = "time_limit"
    inputs = ("started_at", "max_seconds")

    def wake_at(self, obs: Observation) -> float:
        """The limit itself (the stop's grace is only reached after a proposal, which is never skipped)."""
        if obs.max_seconds is None or obs.max_seconds <= 0:
            return math.inf
        return obs.started_at + obs.max_seconds

    def check(self, obs: Observation) -> Proposal | None:
        phase = time_limit_phase(obs.elapsed, obs.max_seconds, self.grace)
        if phase == "ok":
            return None
        return Proposal(
            Trigger.time_up, f"max time of {format_limit(obs.max_seconds)} reached", self.name,
            force_kill=phase == "kill",
        )


def limit_at(started_at: float | None, max_seconds: float | None) -> float:
    """When the experiment's time is up (inf: no limit, or not started yet). The same clock the rule watches
    in `running`, for the states that wait elsewhere (`launching`, `failing`, `repairing`)."""
    if started_at is None or not max_seconds or max_seconds <= 0:
        return math.inf
    return started_at + max_seconds


def time_up_reason(now: float, started_at: float | None, max_seconds: float | None, where: str) -> str | None:
    """The `time_up` reason once the limit is reached while the run was `where` (None before it)."""
    if now < limit_at(started_at, max_seconds):
        return None
    assert max_seconds is not None  # a finite limit has a max time
    return f"max time of {format_limit(max_seconds)} reached {where}"
