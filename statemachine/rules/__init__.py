"""Small independent rules that look at one Observation and may propose a trigger.

The order is the priority: the first proposal the machine accepts wins. A new rule is a new
module here plus one line in `default_rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ajet_runner.statemachine.rules.base import Observation, Proposal, Rule
from ajet_runner.statemachine.rules.cancel import CancelRule
from ajet_runner.statemachine.rules.diagnosis import DEFAULT_SETTLE_SECONDS, DiagnosisRule
from ajet_runner.statemachine.rules.exit_record import EXIT_NOT_RECORDED, ExitRecordRule
from ajet_runner.statemachine.rules.first_step_watchdog import FirstStepRule
from ajet_runner.statemachine.rules.gang_members import GangRule
from ajet_runner.statemachine.rules.plateau import PlateauRule
from ajet_runner.statemachine.rules.process_exit import ProcessExitRule
from ajet_runner.statemachine.rules.schedule import RuleSchedule
from ajet_runner.statemachine.rules.stall import StallRule
from ajet_runner.statemachine.rules.swarm_server import SwarmServerRule
from ajet_runner.statemachine.rules.time_limit import TimeLimitRule

__all__ = [
    "EXIT_NOT_RECORDED", "CancelRule", "DiagnosisRule", "ExitRecordRule", "FirstStepRule", "GangRule",
    "Observation", "PlateauRule", "ProcessExitRule", "Proposal", "Rule", "RuleSchedule", "StallRule", "SwarmServerRule",
    "TimeLimitRule", "decide", "default_rules",
]


def default_rules(
    *,
    time_limit_grace: float = 60.0,
    stall_seconds: float = 1800.0,
    diagnosis_settle: float = DEFAULT_SETTLE_SECONDS,
    plateau_after_fraction: float = 0.5,
    plateau_window: int = 4,
    plateau_epsilon: float = 0.005,
    first_step_seconds: float = 20 * 60.0,
) -> list[Rule]:
    return [
        CancelRule(),
        ExitRecordRule(),  # a command whose exit code could not be recorded (full disk, roots): failed with that
        SwarmServerRule(),  # before the client's exit: a client that lost its server died of that
        ProcessExitRule(),
        TimeLimitRule(grace=time_limit_grace),
        GangRule(),
        DiagnosisRule(settle_seconds=diagnosis_settle),
        StallRule(stall_seconds=stall_seconds),
        FirstStepRule(timeout_seconds=first_step_seconds),
        PlateauRule(after_fraction=plateau_after_fraction, window=plateau_window, epsilon=plateau_epsilon),
    ]


def decide(rules: Sequence[Rule], obs: Observation, accepts: Callable[[str], bool]) -> Proposal | None:
    """The first proposal whose trigger the machine accepts in its current state."""
    for rule in rules:
        proposal = rule.check(obs)
        if proposal is not None and accepts(proposal.trigger):
            return proposal
    return None
