"""The store against a real (private) redis-server: CAS, events, leases, GPU slots."""

import threading

import pytest

from ajet_runner.store.store import Store, TransitionConflict


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


def test_create_publishes_submitted_event_and_indexes(store: Store) -> None:
    store.records.create("e1", {"state": "queued", "purpose": "p", "gpus": [0, 1]}, {"message": "hi"})
    rec = store.records.raw("e1")
    assert rec is not None and rec["state"] == "queued" and rec["version"] == "1" and rec["gpus"] == [0, 1]
    events = store.events.read("e1")
    assert [e["type"] for e in events] == ["submitted"] and events[0]["message"] == "hi"
    assert store.indexes.ids() == ["e1"] and store.indexes.count() == 1


def test_an_event_resent_by_its_writer_is_stored_once(store: Store) -> None:
    """A resend after a lost reply (or a copy still in Redis's input buffer) adds nothing."""
    store.records.create("e1", {"state": "running"}, {})
    first = store.events.publish("e1", {"type": "progress", "n": 1}, once=("w", 1))
    assert first and store.events.publish("e1", {"type": "progress", "n": 1}, once=("w", 1)) == ""
    store.events.publish("e1", {"type": "progress", "n": 2}, once=("w", 2))
    store.events.publish("e1", {"type": "progress", "n": 1}, once=("w", 1))  # a stale copy arriving late
    store.events.publish("e1", {"type": "progress", "n": 9}, once=("other", 1))  # another writer counts alone
    assert [e.get("n") for e in store.events.read("e1")[1:]] == [1, 2, 9]
    store.records.delete("e1")
    assert store.r.exists("ajet:exp:e1:published") == 0


def test_compare_and_set_lets_exactly_one_of_many_claimers_win(store: Store) -> None:
    store.records.create("e1", {"state": "queued"}, {})
    winners: list[str] = []
    barrier = threading.Barrier(8)

    def claim(name: str) -> None:
        s = Store.from_url(_url(store))
        barrier.wait()
        try:
            s.records.transition("e1", expected_version=1, owner=name,
                                 fields={"state": "launching", "owner": name}, event={"type": "transition"})
            winners.append(name)
        except TransitionConflict:
            pass

    threads = [threading.Thread(target=claim, args=(f"w{i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(winners) == 1
    rec = store.records.raw("e1")
    assert rec is not None and rec["owner"] == winners[0] and rec["version"] == "2"
    assert [e["type"] for e in store.events.read("e1")] == ["submitted", "transition"]


def _url(store: Store) -> str:
    kw = store.r.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


def test_live_owner_blocks_others_until_its_lease_expires(store: Store) -> None:
    store.records.create("e1", {"state": "running", "owner": "a"}, {})
    assert store.runs.renew_lease("e1", "a", 30)
    with pytest.raises(TransitionConflict, match="owner"):
        store.records.transition("e1", expected_version=None, owner="b", fields={"owner": "b"}, event={})
    assert not store.runs.renew_lease("e1", "b", 30)
    store.records.update("e1", {"lease_until": store.server_time() - 1})
    store.records.transition("e1", expected_version=None, owner="b", fields={"owner": "b"}, event={"type": "adopted"})
    assert store.records.raw("e1")["owner"] == "b"  # type: ignore[index]


def test_stale_version_is_refused(store: Store) -> None:
    store.records.create("e1", {"state": "queued"}, {})
    store.records.transition("e1", expected_version=1, fields={"state": "launching"}, event={})
    with pytest.raises(TransitionConflict, match="version"):
        store.records.transition("e1", expected_version=1, fields={"state": "finished"}, event={})
    assert store.records.raw("e1")["state"] == "launching"  # type: ignore[index]


def test_stats_counters_and_histogram(store: Store) -> None:
    store.records.create("e1", {"state": "collecting"}, {})
    store.records.transition("e1", expected_version=None, fields={}, event={},
                             stats={"transition": "collecting>finished", "outcome": "completed", "duration": 100.0,
                                    "repair": "cuda_oom|relaunched"})
    stats = store.counters.read()
    assert stats["transitions"]["collecting>finished"] == 1
    assert stats["outcomes"]["completed"] == 1
    assert stats["repairs"]["cuda_oom|relaunched"] == 1
    buckets = stats["duration_bucket:completed"]
    assert "60.0" not in buckets  # 100 s is above the first bucket
    assert buckets["300.0"] == 1 and buckets["inf"] == 1


def test_gpu_reservation_is_disjoint_and_idempotent(store: Store) -> None:
    a = store.slots.reserve_gpus("n1", "a", 4, 8)
    b = store.slots.reserve_gpus("n1", "b", 4, 8)
    assert a is not None and b is not None and not set(a) & set(b)
    assert store.slots.reserve_gpus("n1", "a", 4, 8) == a  # same owner asks again
    assert store.slots.reserve_gpus("n1", "c", 1, 8) is None
    assert sorted(store.slots.release_gpus("n1", "a")) == sorted(a)
    assert store.slots.reserve_gpus("n1", "c", 2, 8) is not None


def test_blocking_event_read_wakes_on_publish(store: Store) -> None:
    store.records.create("e1", {"state": "queued"}, {})
    last = store.events.read("e1")[-1]["event_id"]
    blocking = Store.from_url(_url(store))
    threading.Timer(0.2, lambda: store.events.publish("e1", {"type": "progress", "n": 1})).start()
    got = blocking.events.read("e1", after=last, block_ms=3000)
    assert [e["type"] for e in got] == ["progress"]


def test_unfinished_index_follows_transitions_and_deletes(store: Store) -> None:
    store.records.create("a", {"state": "queued"}, {})
    store.records.create("b", {"state": "queued"}, {})
    assert [r["id"] for r in store.records.unfinished()] == ["a", "b"]
    store.records.transition("a", expected_version=1, fields={"state": "finished"}, event={})
    assert [r["id"] for r in store.records.unfinished()] == ["b"]
    store.records.delete("b")
    assert store.records.unfinished() == []


def test_swarm_port_is_held_by_one_experiment_per_node(store: Store) -> None:
    assert store.slots.reserve_swarm_port("n1", "a", 10086)
    assert store.slots.reserve_swarm_port("n1", "a", 10086)  # idempotent for its holder
    assert not store.slots.reserve_swarm_port("n1", "b", 10086)
    assert store.slots.reserve_swarm_port("n2", "b", 10086)  # another node, another server
    assert not store.slots.release_swarm_port("n1", "b", 10086)  # only the holder releases
    assert store.slots.swarm_port_owners("n1") == {10086: "a"}
    assert store.slots.release_swarm_port("n1", "a", 10086)
    assert store.slots.reserve_swarm_port("n1", "b", 10086)
