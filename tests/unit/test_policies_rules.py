import math

from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.statemachine.models import Evaluation, Finding
from ajet_runner.statemachine.policies import parse_backoff, plateaued, report_due_at, stalled, time_limit_phase
from ajet_runner.statemachine.rules import Observation, decide, default_rules


def evals(*values: float, key: str = "mean_reward") -> list[Evaluation]:
    return [Evaluation(step=i, metrics={key: v, "task_pass_rate@1": v}) for i, v in enumerate(values)]


def obs(**kw: object) -> Observation:
    base: dict[str, object] = dict(now=100.0, started_at=0.0, attempt_started_at=0.0, max_seconds=1000.0,
                                   process_alive=True, last_output_at=99.0)
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def test_backoff_follows_the_seed_then_repeats_the_last_interval() -> None:
    assert [report_due_at(i) for i in range(8)] == [30, 90, 210, 450, 930, 1890, 2850, 3810]
    assert parse_backoff("1, 2,4") == (1.0, 2.0, 4.0)


def test_time_limit_phases() -> None:
    assert time_limit_phase(9.9, 10, 5) == "ok"
    assert time_limit_phase(10, 10, 5) == "stop"
    assert time_limit_phase(15, 10, 5) == "kill"
    assert time_limit_phase(1e9, None, 5) == "ok"


def test_stall_uses_newest_of_output_and_evaluation() -> None:
    assert stalled(100, 10, None, 60)
    assert not stalled(100, 10, 50, 60)
    assert not stalled(100, 10, None, 0)


def test_plateau_needs_time_share_window_and_flatness() -> None:
    flat = evals(0.5, 0.5, 0.501, 0.5, 0.5)
    assert plateaued(flat, elapsed=600, max_seconds=1000, window=4, epsilon=0.005)
    assert not plateaued(flat, elapsed=400, max_seconds=1000, window=4)  # too early
    assert not plateaued(flat[:3], elapsed=600, max_seconds=1000, window=4)  # too few
    assert not plateaued(evals(0.5, 0.52, 0.54, 0.56), elapsed=600, max_seconds=1000, window=4)
    unwatched = [Evaluation(step=i, metrics={"other": 0.5}) for i in range(5)]
    assert not plateaued(unwatched, elapsed=600, max_seconds=1000, window=4)  # nothing to judge
    nan_evals = [Evaluation(step=i, metrics={"mean_reward": math.nan}) for i in range(5)]
    assert not plateaued(nan_evals, elapsed=600, max_seconds=1000, window=4)


def test_rules_priority_and_machine_acceptance() -> None:
    rules = default_rules(stall_seconds=60, diagnosis_settle=10)
    lc = Lifecycle(id="e")
    lc.fire("start")
    lc.fire("launched")
    # cancel beats the time limit
    p = decide(rules, obs(cancel_requested=True, now=2000.0), lc.can)
    assert p is not None and p.trigger == "cancel"
    p = decide(rules, obs(now=1000.0), lc.can)
    assert p is not None and p.trigger == "time_up" and not p.force_kill
    p = decide(rules, obs(now=1061.0, last_output_at=1060.0), lc.can)
    assert p is not None and p.force_kill
    assert decide(rules, obs(), lc.can) is None


def test_exit_rule_judges_exit_codes_and_causes() -> None:
    rules = default_rules()
    lc = Lifecycle(id="e")
    lc.fire("start")
    lc.fire("launched")
    p = decide(rules, obs(process_alive=False, exit_code=0), lc.can)
    assert p is not None and p.trigger == "completed"
    cause = Finding(signature="cuda_oom", fatal=True, line=3, text="OOM", explanation="x")
    p = decide(rules, obs(process_alive=False, exit_code=1, cause=cause), lc.can)
    assert p is not None and p.trigger == "anomaly" and p.finding == cause and "cuda_oom" in p.reason
    p = decide(rules, obs(process_alive=False, exit_code=None, completed_run=True), lc.can)
    assert p is not None and p.trigger == "completed"


def test_diagnosis_waits_to_settle_and_stall_and_plateau_fire() -> None:
    rules = default_rules(stall_seconds=60, diagnosis_settle=10, plateau_window=3)
    lc = Lifecycle(id="e")
    lc.fire("start")
    lc.fire("launched")
    cause = Finding(signature="nccl_timeout", fatal=True, line=3, text="t", explanation="x")
    assert decide(rules, obs(cause=cause, cause_seen_at=95.0), lc.can) is None
    p = decide(rules, obs(cause=cause, cause_seen_at=85.0), lc.can)
    assert p is not None and p.rule == "diagnosis"
    p = decide(rules, obs(last_output_at=30.0, attempt_started_at=0.0), lc.can)
    assert p is not None and p.rule == "stall"
    p = decide(rules, obs(now=600.0, last_output_at=599.0, evaluations=evals(0.7, 0.7, 0.7)), lc.can)
    assert p is not None and p.trigger == "plateau"
