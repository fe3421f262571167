"""A fatal log signature while the process still lives: confirm it before calling the run failing.

The scanner only offers evidence (an exception-shaped line, statemachine/failures/evidence.py) that nothing
has progressed after yet (`Observation.cause`); any progress — a training step, a rollout or
evaluation line, validation output, the trainer's own INFO records — withdraws it (a caught OOM,
a dead actor that Ray replaced). Real launchers print the failure, tear Ray down and exit 1:
acting on the exit keeps the exit code. If the process lingers past the signature's
`settle_seconds` (catalogue.yaml; else the rule's default) with no progress, we call it an
anomaly ourselves — an OOM in one Ray actor while the driver hangs must not wait for the stall rule.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.failures.signatures import signature
from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.rules.base import Observation, Proposal

DEFAULT_SETTLE_SECONDS = 8.0


@dataclass(frozen=True)
class DiagnosisRule:
    settle_seconds: float = DEFAULT_SETTLE_SECONDS
    name: str = "diagnosis"
    inputs = ("process_alive", "cause", "completed_run", "progress_after_cause", "cause_seen_at")

    def wake_at(self, obs: Observation) -> float:
        """When the live cause will have settled."""
        if not obs.process_alive or obs.cause is None or obs.completed_run or obs.progress_after_cause:
            return math.inf
        seen = obs.cause_seen_at if obs.cause_seen_at is not None else obs.now
        return seen + self.settle_for(obs.cause.signature)

    def settle_for(self, sig_id: str) -> float:
        try:
            own = signature(sig_id).settle_seconds
        except KeyError:
            own = None
        return self.settle_seconds if own is None else own

    def check(self, obs: Observation) -> Proposal | None:
        if not obs.process_alive or obs.cause is None or obs.completed_run or obs.progress_after_cause:
            return None
        seen = obs.cause_seen_at if obs.cause_seen_at is not None else obs.now
        if obs.now - seen < self.settle_for(obs.cause.signature):
            return None
        return Proposal(Trigger.anomaly, f"fatal log signature {obs.cause.signature}", self.name, obs.cause)
