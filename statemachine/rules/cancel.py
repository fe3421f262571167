"""A person or a client asked to stop the experiment."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.rules.base import Observation, Proposal


@dataclass(frozen=True)
class CancelRule:
    name: str = "cancel"
    inputs = ("cancel_requested",)

    def wake_at(self, obs: Observation) -> float:
        return math.inf

    def check(self, obs: Observation) -> Proposal | None:
        if obs.cancel_requested:
            return Proposal(Trigger.cancel, "stop requested", self.name)
        return None
