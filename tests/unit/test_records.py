"""The stored shapes (store/records.py) and the counter labels (store/cluster/stats.py) read what older code wrote."""

from __future__ import annotations

import json

from ajet_runner.store.cluster.stats import TransitionStats, split_pair, split_transition
from ajet_runner.store.records import Attempt, Context, ExperimentRecord, PendingRepair, RepairRecord, RepairResult
from ajet_runner.store.store import Store

OLD_CTX = {  # a `ctx` as the dict-based driver stored it
    "command": "python -m ajet.launcher --conf a.yaml", "env": {"A": "1"}, "gpus": [0, 1],
    "attempts": [{"number": 1, "started_at": 10.0, "ended_at": 20.0, "exit_code": 1, "command": "x",
                  "log_path": "/r/logs/attempt-1.log", "end_reason": "exit 1"}],
    "repairs": [{"at": 21.0, "attempt": 1, "signature": "oom", "result": "relaunched", "changes": ["bs 8 -> 4"]}],
    "pending_repair": {}, "val_start": {"inode": 3, "offset": 0}, "an_unknown_field": True,
}


def test_an_old_context_loads_typed_and_writes_back_the_same_shape() -> None:
    ctx = Context.from_dict(OLD_CTX)
    assert isinstance(ctx.attempts[0], Attempt) and ctx.attempts[0].exit_code == 1
    assert isinstance(ctx.repairs[0], RepairRecord) and ctx.repairs[0].result is RepairResult.relaunched
    assert ctx.repairs[0].relaunched and ctx.pending_repair is None
    stored = json.loads(json.dumps(ctx.to_json()))
    assert stored["pending_repair"] == {} and stored["repairs"][0]["result"] == "relaunched"
    assert stored["attempts"][0] == OLD_CTX["attempts"][0]
    assert Context.from_dict(stored) == ctx and "an_unknown_field" not in stored


def test_a_pending_repair_round_trips_without_empty_keys() -> None:
    ctx = Context(pending_repair=PendingRepair(cause={"signature": "oom"}, reason="exit 1", log_tail=["a"]))
    stored = ctx.to_json()["pending_repair"]
    assert stored == {"cause": {"signature": "oom"}, "reason": "exit 1", "log_excerpt": "", "log_tail": ["a"]}
    assert Context.from_dict({"pending_repair": stored}).pending_repair == ctx.pending_repair


def test_repair_results_are_an_enum_and_an_unknown_one_reads_as_none() -> None:
    assert {r.value for r in RepairResult} == {"relaunched", "not repairable", "no applicable change", "budget spent",
                                             "not relaunched"}
    assert RepairRecord(at=1, attempt=1, result="Budget Spent ").result is RepairResult.budget_spent
    assert RepairRecord(at=1, attempt=1, result="exploded").result == ""
    assert f"{RepairResult.no_applicable_change}" == "no applicable change"


def test_an_experiment_record_reads_the_decoded_hash() -> None:
    rec = ExperimentRecord.from_hash({
        "id": "abc", "version": "7", "created_at": "100.5", "state": "running", "max_seconds": "",
        "ctx": OLD_CTX, "cancel_requested": "1", "gpus_needed": "2", "lifecycle": None, "log_tail": None,
        "driver_pid": "123",
    })
    assert (rec.version, rec.created_at, rec.max_seconds, rec.gpus_needed) == (7, 100.5, None, 2)
    assert rec.cancel_requested and not rec.delete_requested and not rec.finished
    assert rec.ctx.attempts[0].number == 1 and rec.lifecycle == {} and rec.log_tail == []
    assert rec.model_extra == {"driver_pid": "123"}


def test_transition_stats_pack_and_unpack_in_one_place() -> None:
    stats = TransitionStats(transition=("failing", "repairing"), repair=("oom", "relaunched"),
                            advised=("gpt|x", "advised"))
    packed = stats.packed(["60.0", "inf"])
    assert packed == {"transition": "failing>repairing", "repair": "oom|relaunched", "advised": "gpt|x|advised"}
    assert split_transition(packed["transition"]) == ("failing", "repairing")
    assert split_pair(packed["repair"]) == ("oom", "relaunched")
    assert split_pair(packed["advised"]) == ("gpt|x", "advised")  # the model may hold the separator
    assert split_pair("no-separator") == ("no-separator", "")
    assert TransitionStats.of(packed) == stats
    done = TransitionStats(outcome="completed", duration=5.0).packed(["inf"])
    assert done == {"outcome": "completed", "duration": 5.0, "buckets": ["inf"]}
    assert TransitionStats.of(None).packed([]) == {}


def test_the_store_hands_out_typed_records(redis_url: str) -> None:
    """Records.record over the tests' throwaway redis-server."""
    store = Store.from_url(redis_url)
    store.records.create("e1", {"state": "queued", "ctx": OLD_CTX, "max_seconds": ""}, {"message": "submitted"})
    rec = store.records.get("e1")
    assert rec is not None and rec.version == 1 and rec.state == "queued" and rec.max_seconds is None
    assert rec.ctx.repairs[0].result is RepairResult.relaunched and store.records.get("nope") is None


def test_a_stop_request_is_a_flag_on_an_existing_record_only(redis_url: str) -> None:
    store = Store.from_url(redis_url)
    assert store.runs.request_stop("never-submitted", delete=True) is False
    assert not store.records.exists("never-submitted")
    store.records.create("s1", {"state": "running"}, {"message": "submitted"})
    assert store.runs.request_stop("s1") is True
    rec = store.records.get("s1")
    assert rec is not None and rec.cancel_requested and not rec.delete_requested
    assert store.runs.request_stop("s1", delete=True) and store.records.get("s1").delete_requested  # type: ignore[union-attr]
