"""Which rules to run on an observation: a rule runs when its verdict can have changed.

The watch loop observes every tick, but most ticks change little (a few log lines: the output clock
moved, nothing else). A rule that declares `inputs` (the Observation fields it reads, the clock
aside) and `wake_at(obs)` (the wall time from which the clock alone could change its answer on these
inputs; math.inf when it never could) is run again only when one of those fields differs from its last
run or the clock reached that time. A rule without them runs on every observation; a rule whose last
run proposed something always runs again (the machine may accept it now). The order is still the
priority: the first proposal the machine accepts wins, as with `decide`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

from ajet_runner.statemachine.rules.base import Observation, Proposal, Rule

_NEVER = object()  # no run whose inputs can be reused


class RuleSchedule:
    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = list(rules)
        self._inputs: list[Callable[[Observation], Any] | None] = []
        for rule in self.rules:
            names: tuple[str, ...] = getattr(rule, "inputs", ())
            self._inputs.append(attrgetter(*names) if names and hasattr(rule, "wake_at") else None)
        self._last: list[Any] = [_NEVER] * len(self.rules)
        self._wake = [math.inf] * len(self.rules)
        self.checks = 0  # rule checks run, and skipped (their inputs and the clock said nothing changed)
        self.skipped = 0

    def decide(self, obs: Observation, accepts: Callable[[str], bool]) -> Proposal | None:
        """The first proposal whose trigger the machine accepts, running only the rules that may have one."""
        for i, rule in enumerate(self.rules):
            get = self._inputs[i]
            key = get(obs) if get is not None else _NEVER
            if key is not _NEVER and obs.now < self._wake[i] and key == self._last[i]:
                self.skipped += 1
                continue
            self.checks += 1
            proposal = rule.check(obs)
            if proposal is None:
                if key is not _NEVER:
                    self._last[i], self._wake[i] = key, rule.wake_at(obs)  # type: ignore[attr-defined]
                continue
            self._last[i] = _NEVER
            if accepts(proposal.trigger):
                return proposal
        return None
