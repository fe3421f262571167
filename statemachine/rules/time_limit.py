"""`exp_max_time` is a hard promise: stop gracefully at the limit, kill after the grace period."""

from __future__ import annotations

from dataclasses import dataclass

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.policies import time_limit_phase
from ajet_runner.statemachine.rules.base import Observation, Proposal


@dataclass(frozen=True)
class TimeLimitRule:
    grace: float = 60.0
    name: str = "time_limit"

    def check(self, obs: Observation) -> Proposal | None:
        phase = time_limit_phase(obs.elapsed, obs.max_seconds, self.grace)
        if phase == "ok":
            return None
        return Proposal(
            Trigger.time_up, f"max time of {format_limit(obs.max_seconds)} reached", self.name,
            force_kill=phase == "kill",
        )
