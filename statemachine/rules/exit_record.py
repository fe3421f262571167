"""The command ended but its exit code could not be recorded for a named cause (a full result
disk, a result dir swapped out of the allowed roots): failed with that cause, never repaired —
a relaunch would meet the same disk or the same refusal."""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.models import Finding
from ajet_runner.statemachine.rules.base import Observation, Proposal

EXIT_NOT_RECORDED = "exit_not_recorded"


@dataclass(frozen=True)
class ExitRecordRule:
    name: str = "exit_record"
    inputs = ("process_alive", "exit_record_error", "exit_code")

    def wake_at(self, obs: Observation) -> float:
        return math.inf

    def check(self, obs: Observation) -> Proposal | None:
        if obs.process_alive or not obs.exit_record_error:
            return None
        code = "" if obs.exit_code is None else f" (it exited with code {obs.exit_code})"
        reason = f"the command's exit code could not be recorded{code}: {obs.exit_record_error}"
        finding = Finding(signature=EXIT_NOT_RECORDED, fatal=True, line=0, text=obs.exit_record_error,
                          explanation=reason, repairable=False)
        return Proposal(Trigger.anomaly, reason, self.name, finding)
