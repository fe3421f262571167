"""The indexes the transition script keeps (per state, per node, the node's active set), retention of
finished records, and the lazy clean-up, against a real redis-server."""

from __future__ import annotations

import pytest
import redis

from ajet_runner.store.keys import INDEX, exp_key, node_active_key, state_index_key
from ajet_runner.store.store import Store


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store(redis.Redis.from_url(redis_url), retention_seconds=3600)


def run_to(store: Store, exp_id: str, node: str, *states: str) -> None:
    for i, state in enumerate(states):
        fields = {"state": state, **({"node": node} if state != "queued" else {})}
        store.records.transition(exp_id, expected_version=None, fields=fields, event={"type": "transition", "n": i},
                                 node=node)


def test_state_and_node_indexes_follow_every_transition(store: Store) -> None:
    store.records.create("a", {"state": "queued", "target_node": "n1"}, {})
    store.records.create("b", {"state": "queued"}, {})
    assert store.indexes.ids_in(state="queued") == (["b", "a"], 2)
    assert store.indexes.ids_in(node="n1") == (["a"], 1)
    run_to(store, "a", "n1", "launching", "running")
    assert store.indexes.ids_in(state="queued") == (["b"], 1) and store.indexes.ids_in(state="running") == (["a"], 1)
    assert [r["id"] for r in store.indexes.node_active("n1", ["lease_until"])] == ["a"]
    assert store.indexes.node_active("n2", []) == []
    run_to(store, "a", "n1", "collecting", "finished")
    assert store.indexes.ids_in(state="finished") == (["a"], 1) and store.indexes.ids_in(state="running") == ([], 0)
    assert store.indexes.node_active("n1", []) == [] and not store.r.smembers(node_active_key("n1"))
    assert store.indexes.ids_in(node="n1") == (["a"], 1)  # a node's list keeps its finished ones


def test_a_node_scan_reads_only_its_own_node_and_only_the_fields_asked(store: Store) -> None:
    for i in range(30):
        node = "mine" if i < 3 else f"other{i % 5}"
        store.records.create(f"e{i}", {"state": "queued", "blueprint": "x" * 10_000}, {})
        run_to(store, f"e{i}", node, "launching", "running")
    recs = store.indexes.node_active("mine", ["lease_until"])
    assert sorted(r["id"] for r in recs) == ["e0", "e1", "e2"]
    assert set(recs[0]) == {"id", "state", "node", "lease_until"}  # never the 10 KB blueprint


def test_an_entry_that_moved_on_is_dropped_from_the_node_set_when_met(store: Store) -> None:
    store.records.create("a", {"state": "queued"}, {})
    run_to(store, "a", "n1", "launching", "running")
    store.records.transition("a", expected_version=None, fields={"node": "n2"}, event={"type": "adopted"}, node="n2")
    assert store.indexes.node_active("n1", []) == [] and not store.r.sismember(node_active_key("n1"), "a")
    assert [r["id"] for r in store.indexes.node_active("n2", [])] == ["a"]


def test_a_finished_record_expires_after_the_retention_time_and_leaves_the_indexes(store: Store) -> None:
    store.records.create("a", {"state": "queued"}, {})
    store.log_tail.append("a", ["line"], 5)
    run_to(store, "a", "n1", "launching", "running")
    store.events.publish("a", {"type": "progress"}, once=("w", 1))
    assert store.r.ttl(exp_key("a")) == -1  # unfinished: kept
    run_to(store, "a", "n1", "collecting", "finished")
    assert 3500 < store.r.ttl(exp_key("a")) <= 3600
    assert 3500 < store.r.ttl(exp_key("a") + ":events") <= 3600 and store.r.ttl(exp_key("a") + ":tail") > 3500
    assert store.r.ttl(exp_key("a") + ":published") > 3500
    store.events.publish("a", {"type": "info"}, once=("late", 1))  # an event after the end expires with the rest
    assert store.r.ttl(exp_key("a") + ":published") > 3500
    store.r.delete(exp_key("a"))  # what the expiry does
    assert store.indexes.prune(["a"]) == 1
    assert not store.r.zscore(INDEX, "a") and not store.r.zscore(state_index_key("finished"), "a")
    keep = Store(store.r, retention_seconds=0)
    keep.records.create("b", {"state": "queued"}, {})
    run_to(keep, "b", "n1", "launching", "finished")
    assert keep.r.ttl(exp_key("b")) == -1  # 0 = for ever


def test_indexes_are_built_once_for_records_written_before_them(store: Store) -> None:
    for exp_id, state, node in (("old1", "running", "n1"), ("old2", "queued", ""), ("old3", "finished", "n2")):
        store.r.hset(exp_key(exp_id), mapping={"id": exp_id, "state": state, "node": node, "created_at": "1"})
        store.r.zadd(INDEX, {exp_id: 1})
    assert store.indexes.backfill()
    assert store.indexes.ids_in(state="running") == (["old1"], 1)
    assert store.indexes.ids_in(state="queued") == (["old2"], 1)
    assert [r["id"] for r in store.indexes.node_active("n1", [])] == ["old1"]
    assert store.indexes.ids_in(node="n2")[1] == 1
    assert not store.indexes.backfill()  # done once
