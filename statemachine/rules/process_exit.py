"""The command ended: exit 0 is success, anything else is an anomaly to diagnose."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.rules.base import Observation, Proposal


@dataclass(frozen=True)
class ProcessExitRule:
    name: str = "process_exit"
    inputs = ("process_alive", "exit_code", "completed_run", "cause")

    def wake_at(self, obs: Observation) -> float:
        return math.inf

    def check(self, obs: Observation) -> Proposal | None:
        if obs.process_alive:
            return None
        code = obs.exit_code
        if code == 0:
            return Proposal(Trigger.completed, "the command exited 0", self.name)
        if code is None and obs.completed_run:
            return Proposal(Trigger.completed, "the command ended after its final validation", self.name)
        what = "ended without recording an exit code" if code is None else f"exited with code {code}"
        if obs.cause is not None:
            return Proposal(Trigger.anomaly, f"the command {what}: {obs.cause.signature}", self.name, obs.cause)
        return Proposal(Trigger.anomaly, f"the command {what}", self.name)
