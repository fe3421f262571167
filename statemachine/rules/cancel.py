"""A person or a client asked to stop the experiment."""

from __future__ import annotations

from dataclasses import dataclass

from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.rules.base import Observation, Proposal


@dataclass(frozen=True)
class CancelRule:
    name: str = "cancel"

    def check(self, obs: Observation) -> Proposal | None:
        if obs.cancel_requested:
            return Proposal(Trigger.cancel, "stop requested", self.name)
        return None
