"""A multi-node run is one gang: a non-head rank that ended, or whose node went away, ends the attempt.

The head's own exit decides a healthy run's outcome (ProcessExitRule); the non-head commands are
expected to block for ever. When one of them is gone while the head still runs, the head would
train without it (or hang in a collective), so the attempt fails with the signature
`gang_member_lost`, whose repair stops every rank and relaunches the whole gang.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ajet_runner.statemachine.lifecycle import Trigger
from ajet_runner.statemachine.models import Finding, RepairAction
from ajet_runner.statemachine.rules.base import Observation, Proposal

SIGNATURE = "gang_member_lost"
EXPLANATION = ("a non-head node of this multi-node run stopped (its command exited or its worker's lease "
               "ran out) while the head was running: the Ray cluster lost a member")


def gang_finding(reason: str) -> Finding:
    """The diagnosis: repairable by stopping every rank and relaunching the whole gang."""
    return Finding(signature=SIGNATURE, fatal=True, line=0, text=reason, repairable=True,
                   explanation=f"{EXPLANATION}: {reason}",
                   repair=[RepairAction(kind="cleanup", value="session",
                                        description="stop every rank of the gang; the relaunch starts all of them "
                                                    "again, non-head ranks first")])


@dataclass(frozen=True)
class GangRule:
    name: str = "gang"
    inputs = ("gang_problem", "process_alive")

    def wake_at(self, obs: Observation) -> float:
        return math.inf

    def check(self, obs: Observation) -> Proposal | None:
        if not obs.gang_problem or not obs.process_alive:
            return None
        return Proposal(Trigger.anomaly, obs.gang_problem, self.name, gang_finding(obs.gang_problem))
