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
