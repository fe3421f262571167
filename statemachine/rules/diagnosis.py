"""A fatal log signature while the process still lives: give it a moment to exit on its own.

Real launchers print the failure, then tear Ray down and exit 1; acting on the exit keeps the
exit code. If the process lingers past `settle_seconds`, we call it an anomaly ourselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from statemachine.rules.base import Observation, Proposal


@dataclass(frozen=True)
class DiagnosisRule:
    settle_seconds: float = 60.0
    name: str = "diagnosis"

    def check(self, obs: Observation) -> Proposal | None:
        if not obs.process_alive or obs.cause is None or obs.completed_run:
            return None
        seen = obs.cause_seen_at if obs.cause_seen_at is not None else obs.now
        if obs.now - seen < self.settle_seconds:
            return None
        return Proposal("anomaly", f"fatal log signature {obs.cause.signature}", self.name, obs.cause)
