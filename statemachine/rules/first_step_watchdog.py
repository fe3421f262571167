"""No training step within the first-step timeout: the run never got going (swarm skill rule).

A launcher that sits in start-up (a server it never reaches, a Ray cluster that never forms)
prints output, so the stall rule stays quiet; this rule calls it a failure with its own
signature, `first_step_timeout`, counted from the attempt's start.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.logs.first_step import DEFAULT_FIRST_STEP_SECONDS
from ajet_runner.statemachine.models import Finding
from ajet_runner.statemachine.rules.base import Observation, Proposal

SIGNATURE = "first_step_timeout"


@dataclass(frozen=True)
class FirstStepRule:
    timeout_seconds: float = DEFAULT_FIRST_STEP_SECONDS
    name: str = SIGNATURE
    inputs = ("process_alive", "first_step_seen", "completed_run", "first_step_timeout", "attempt_started_at")

    def wake_at(self, obs: Observation) -> float:
        """The first-step timeout, counted from the attempt's start."""
        if not obs.process_alive or obs.first_step_seen or obs.completed_run:
            return math.inf
        limit = obs.first_step_timeout if obs.first_step_timeout is not None else self.timeout_seconds
        return math.inf if limit <= 0 else obs.attempt_started_at + limit

    def check(self, obs: Observation) -> Proposal | None:
        if not obs.process_alive or obs.first_step_seen or obs.completed_run:
            return None
        limit = obs.first_step_timeout if obs.first_step_timeout is not None else self.timeout_seconds
        if limit <= 0 or obs.now - obs.attempt_started_at < limit:
            return None
        reason = f"no training step within the first-step timeout of {format_limit(limit)}"
        finding = Finding(signature=SIGNATURE, fatal=True, line=0, text="", repairable=False,
                          explanation=reason + " (no kl_loss value, Training Progress step or global_step)")
        return Proposal(Trigger.anomaly, reason, self.name, finding)
