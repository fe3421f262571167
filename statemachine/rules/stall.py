"""No output and no evaluation for a long time: the run hangs (an NCCL wait, a dead actor)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.policies import stalled
from ajet_runner.statemachine.rules.base import Observation, Proposal


@dataclass(frozen=True)
class StallRule:
    stall_seconds: float = 1800.0
    name: str = "stall"
    inputs = ("process_alive", "last_output_at", "attempt_started_at", "last_eval_at")

    def wake_at(self, obs: Observation) -> float:
        """When the newest output or evaluation will be `stall_seconds` old."""
        if not obs.process_alive or self.stall_seconds <= 0:
            return math.inf
        return max(obs.last_output_at, obs.attempt_started_at, obs.last_eval_at or 0.0) + self.stall_seconds

    def check(self, obs: Observation) -> Proposal | None:
        if not obs.process_alive:
            return None
        last_output = max(obs.last_output_at, obs.attempt_started_at)
        if stalled(obs.now, last_output, obs.last_eval_at, self.stall_seconds):
            return Proposal(Trigger.anomaly, f"stalled: no output for {format_limit(self.stall_seconds)}", self.name)
        return None
