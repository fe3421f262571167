"""Stop early when rewards stopped moving late in the run (docs/background.md#manual-workflow)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.metric_vocabulary import PLATEAU_PROSE
from ajet_runner.statemachine.policies import plateaued
from ajet_runner.statemachine.rules.base import Observation, Proposal


@dataclass(frozen=True)
class PlateauRule:
    after_fraction: float = 0.5
    window: int = 4
    epsilon: float = 0.005
    name: str = "plateau"
    inputs = ("process_alive", "evaluations", "started_at", "max_seconds")

    def wake_at(self, obs: Observation) -> float:
        """When the run will be past `after_fraction` of its time (before, no plateau is judged)."""
        if not obs.process_alive or not obs.max_seconds or obs.max_seconds <= 0:
            return math.inf
        at = obs.started_at + self.after_fraction * obs.max_seconds
        return at if obs.now < at else math.inf  # past it, only new evaluations can change the verdict

    def check(self, obs: Observation) -> Proposal | None:
        if not obs.process_alive:
            return None
        if plateaued(
            obs.evaluations,
            elapsed=obs.elapsed,
            max_seconds=obs.max_seconds,
            after_fraction=self.after_fraction,
            window=self.window,
            epsilon=self.epsilon,
        ):
            return Proposal(
                Trigger.plateau,
                f"{PLATEAU_PROSE} moved less than {self.epsilon} over the last "
                f"{self.window} evaluations",
                self.name,
            )
        return None
