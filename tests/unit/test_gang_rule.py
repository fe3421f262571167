"""The gang rule: a lost non-head rank ends a running head's attempt with a repairable diagnosis."""

from __future__ import annotations

from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.statemachine.rules import GangRule, Observation, decide, default_rules


def obs(**kw: object) -> Observation:
    base = dict(now=100.0, started_at=0.0, attempt_started_at=0.0, max_seconds=3600.0, process_alive=True,
                last_output_at=99.0)
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def test_nothing_to_say_while_every_rank_is_there() -> None:
    assert GangRule().check(obs()) is None


def test_a_lost_rank_is_a_repairable_anomaly() -> None:
    p = GangRule().check(obs(gang_problem="rank 1 (node b) exited with 137"))
    assert p is not None and p.trigger == "anomaly" and p.rule == "gang"
    assert p.finding is not None and p.finding.signature == "gang_member_lost" and p.finding.repairable
    assert [a.kind for a in p.finding.repair] == ["cleanup"] and "rank 1" in p.finding.explanation


def test_the_heads_own_exit_decides_first() -> None:
    gone = obs(process_alive=False, exit_code=0, completed_run=True, gang_problem="rank 1 exited with 143")
    assert GangRule().check(gone) is None
    lc = Lifecycle(id="x")
    for trigger in ("start", "launched"):
        lc.fire(trigger)
    p = decide(default_rules(), gone, lc.can)
    assert p is not None and p.rule != "gang"


def test_cancel_and_time_limit_win_over_a_lost_rank() -> None:
    lc = Lifecycle(id="x")
    for trigger in ("start", "launched"):
        lc.fire(trigger)
    p = decide(default_rules(), obs(cancel_requested=True, gang_problem="rank 1 exited"), lc.can)
    assert p is not None and p.trigger == "cancel"
    p = decide(default_rules(time_limit_grace=1), obs(now=4000.0, gang_problem="rank 1 exited"), lc.can)
    assert p is not None and p.rule != "gang"
