import pytest

from ajet_runner.statemachine.lifecycle import TRANSITIONS, Lifecycle, RepairBudget, State, TransitionRefused


def walk(lc: Lifecycle, *triggers: str, **detail: object) -> Lifecycle:
    for t in triggers:
        lc.fire(t, **detail)
    return lc


def test_happy_path_ends_finished_completed_with_history() -> None:
    lc = walk(Lifecycle(id="e1"), "start", "launched", "completed", "collected")
    assert lc.state == "finished" and lc.outcome == "completed"
    assert [h["trigger"] for h in lc.history] == ["start", "launched", "completed", "collected"]
    assert [h["to"] for h in lc.history] == ["launching", "running", "collecting", "finished"]
    assert lc.attempt == 1 and len(lc.history) == 4


@pytest.mark.parametrize(
    ("trigger", "outcome"),
    [("time_up", "timed_out"), ("plateau", "early_stopped"), ("cancel", "cancelled")],
)
def test_running_stops_lead_to_collecting_with_their_outcome(trigger: str, outcome: str) -> None:
    lc = walk(Lifecycle(id="e"), "start", "launched", trigger)
    assert lc.state == "collecting" and lc.outcome == outcome


def test_repair_loop_counts_attempts_and_budget_per_signature() -> None:
    lc = Lifecycle(id="e", budget=RepairBudget(total=3, per_signature=2))
    walk(lc, "start", "launched", "anomaly")
    for attempt in (2, 3):
        lc.fire("repair", signature="cuda_oom")
        lc.fire("relaunch")
        assert lc.attempt == attempt
        walk(lc, "launched", "anomaly")
    assert not lc.can("repair", signature="cuda_oom")  # per-signature budget spent
    assert lc.can("repair", signature="network_unreachable")
    with pytest.raises(TransitionRefused, match="guard"):
        lc.fire("repair", signature="cuda_oom")
    assert lc.state == "failing"
    lc.fire("give_up", reason="budget spent")
    assert lc.outcome == "failed" and lc.reason == "budget spent"


def test_total_repair_budget() -> None:
    lc = Lifecycle(id="e", budget=RepairBudget(total=1, per_signature=5))
    walk(lc, "start", "launched", "anomaly")
    lc.fire("repair", signature="a")
    walk(lc, "relaunch", "launched", "anomaly")
    assert not lc.can("repair", signature="b")


def test_invalid_triggers_are_refused_and_change_nothing() -> None:
    lc = Lifecycle(id="e")
    with pytest.raises(TransitionRefused, match="not allowed from state 'queued'"):
        lc.fire("completed")
    with pytest.raises(TransitionRefused, match="unknown trigger"):
        lc.fire("explode")
    assert lc.state == "queued" and lc.history == []


def test_reject_from_queued_then_give_up() -> None:
    lc = walk(Lifecycle(id="e"), "reject", "give_up", "collected")
    assert lc.outcome == "failed" and lc.state == "finished"


def test_round_trip_resumes_without_side_effects() -> None:
    lc = walk(Lifecycle(id="e"), "start", "launched", "anomaly")
    lc.fire("repair", signature="x")
    data = lc.to_dict()
    again = Lifecycle.from_dict(data)
    assert again.state == "repairing" and again.repairs == {"x": 1} and again.history == lc.history
    assert again.history == lc.history
    again.fire("relaunch")
    assert again.attempt == 2


def test_from_dict_rejects_unknown_state() -> None:
    with pytest.raises(ValueError, match="unknown lifecycle state"):
        Lifecycle.from_dict({"id": "e", "state": "dancing"})


def test_every_design_transition_is_defined() -> None:
    pairs = set()
    for t in TRANSITIONS:
        sources = t["source"] if isinstance(t["source"], list) else [t["source"]]
        for s in sources:
            pairs.add((State(s).value, t["trigger"], State(t["dest"]).value))
    expected = {
        ("queued", "start", "launching"), ("queued", "reject", "failing"), ("launching", "reject", "failing"),
        ("launching", "launched", "running"), ("running", "completed", "collecting"),
        ("running", "anomaly", "failing"), ("running", "time_up", "collecting"),
        ("running", "plateau", "collecting"), ("running", "cancel", "collecting"),
        ("failing", "repair", "repairing"), ("failing", "give_up", "collecting"),
        ("repairing", "relaunch", "launching"), ("collecting", "collected", "finished"),
    }
    assert expected <= pairs


def test_initial_dict_is_what_a_new_lifecycle_stores() -> None:
    assert Lifecycle.initial_dict("e1") == Lifecycle(id="e1").to_dict()
    assert Lifecycle.from_dict(Lifecycle.initial_dict("e2")).state == State.queued.value
