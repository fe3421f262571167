"""The first-step watchdog: step detection in log text, the timeout from the blueprint text, the rule."""

from __future__ import annotations

import pytest

from ajet_runner.statemachine.logs.first_step import first_step_timeout_from_text, shows_training_step
from ajet_runner.statemachine.rules import FirstStepRule, Observation, default_rules


@pytest.mark.parametrize("text, shown", [
    ("(TaskRunner pid=1) step:3 - actor/kl_loss:0.0012 - critic/score", True),
    ("Training Progress: 1/6 | kl_loss: 0.01000", True),
    ("Training Progress:   0%|          | 0/20 [00:00<?, ?it/s]", False),
    ("Training Progress:  10%|█         | 2/20 [00:05<00:45]", True),
    ("{'training/global_step': 4, 'critic/real_reward': 0.5}", True),
    ("global_steps: 0", False),
    ("Loading checkpoint shards ... waiting for the swarm server", False),
])
def test_step_detection(text: str, shown: bool) -> None:
    assert shows_training_step(text) is shown


@pytest.mark.parametrize("text, seconds", [
    ("24 hours. First step success timeout: 20 minutes", 1200.0),
    ("12 小时；首步超时 5 分钟", 300.0),
    ("first_step_timeout = 90 seconds", 90.0),
    ("12 hours", None),
])
def test_timeout_from_max_time_text(text: str, seconds: float | None) -> None:
    assert first_step_timeout_from_text(text) == seconds


def _obs(now: float, **kw: object) -> Observation:
    base = dict(now=now, started_at=0.0, attempt_started_at=0.0, max_seconds=None, process_alive=True,
                first_step_seen=False)
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def test_rule_fires_only_after_the_timeout_without_a_step() -> None:
    rule = FirstStepRule(timeout_seconds=60)
    assert rule.check(_obs(59)) is None
    proposal = rule.check(_obs(61))
    assert proposal is not None and proposal.trigger == "anomaly" and proposal.finding is not None
    assert proposal.finding.signature == "first_step_timeout" and proposal.reason.endswith("timeout of 1m")
    assert rule.check(_obs(61, first_step_seen=True)) is None
    assert rule.check(_obs(61, process_alive=False)) is None
    assert rule.check(_obs(61, first_step_timeout=120.0)) is None
    assert rule.check(_obs(121, first_step_timeout=120.0)) is not None


def test_default_rules_hold_the_watchdog_with_twenty_minutes() -> None:
    rules = [r for r in default_rules() if isinstance(r, FirstStepRule)]
    assert len(rules) == 1 and rules[0].timeout_seconds == 1200.0


@pytest.mark.parametrize("text, seconds", [
    ("1 minute. First step success timeout: 6 seconds", 60.0),
    ("12 小时，首步超时 20 分钟", 12 * 3600.0),
])
def test_max_time_ignores_the_first_step_clause(text: str, seconds: float) -> None:
    from ajet_runner.statemachine.blueprint.parse import parse_blueprint

    bp = parse_blueprint(f"[exp_purpose] x\n[exp_max_time] {text}\n")
    assert bp.exp_max_time_seconds == seconds


@pytest.mark.parametrize("line", ["kl_loss: 0.31", "KL_LOSS=-1", "Training Progress:  30%|###  | 3/10",
                                  "TRAINING PROGRESS 1 / 4", "global_steps: 12", "Global_Step=3"])
@pytest.mark.parametrize("odd", ["", "\u0131", "\u0130", "\u017f", "\u212a"])
def test_the_word_prefilter_never_hides_a_step_the_pattern_sees(line: str, odd: str) -> None:
    """shows_training_step looks for case-folded words before the regex: it must answer as the regex
    alone does, odd case-insensitive letters (dotless i, long s, Kelvin sign) included."""
    from ajet_runner.statemachine.logs.first_step import _STEP
    for i in range(len(line)):
        text = f"(pid=1) {line[:i]}{odd or line[i]}{line[i + 1:]} tail"
        assert shows_training_step(text) == (_STEP.search(text) is not None), text
