"""The gang reservation in a real Redis: all or nothing over several nodes, never a partial hold, one
release frees every node; a rank is held by one job at a time."""

from __future__ import annotations

import threading

import pytest

from ajet_runner.store.cluster.gangs import GangStore
from ajet_runner.store.keys import gang_key
from ajet_runner.store.store import Store

pytestmark = pytest.mark.integration


@pytest.fixture()
def stores(redis_url: str) -> tuple[Store, GangStore]:
    store = Store.from_url(redis_url)
    return store, GangStore(store.r)


def test_a_gang_takes_every_node_at_once_or_nothing(stores) -> None:
    store, gangs = stores
    # b has only 4 free: a 2 x 8 gang cannot use it; c can.
    assert store.slots.reserve_gpus("b", "single", 4, 8) == [0, 1, 2, 3]
    gang = gangs.reserve("g1", ("a", 8), [("b", 8), ("c", 8)], 2, 8)
    assert gang is not None and gang.nodes == ["a", "c"] and gang.gpus == {"a": list(range(8)), "c": list(range(8))}
    assert set(store.slots.gpu_owners("a").values()) == {"g1"} and set(store.slots.gpu_owners("c").values()) == {"g1"}
    assert gangs.reserve("g1", ("a", 8), [("b", 8), ("c", 8)], 2, 8).nodes == ["a", "c"]  # idempotent
    # No room for a second gang: nothing at all is held for it, on any node.
    assert gangs.reserve("g2", ("b", 8), [("a", 8), ("c", 8)], 2, 4) is None
    assert "g2" not in set(store.slots.gpu_owners("b").values()) and not store.r.exists(gang_key("g2"))
    # The head must fit itself: a head without room is no gang, even if two others would do.
    assert gangs.reserve("g3", ("a", 8), [("d", 8), ("e", 8)], 2, 8) is None
    assert store.slots.gpu_owners("d") == {} and store.slots.gpu_owners("e") == {}

    assert gangs.release("g1") == {"a": list(range(8)), "c": list(range(8))}
    assert store.slots.gpu_owners("a") == {} and store.slots.gpu_owners("c") == {}
    assert store.slots.gpu_owners("b") == {i: "single" for i in range(4)}  # another experiment's GPUs stay
    assert 0 < store.r.ttl(gang_key("g1")) <= 7 * 86400  # the record (for the report) expires later


def test_two_gangs_racing_for_the_same_nodes_never_split_them(stores) -> None:
    store, gangs = stores
    nodes = [("a", 8), ("b", 8)]
    results: dict[str, object] = {}

    def grab(exp_id: str, head: tuple[str, int]) -> None:
        results[exp_id] = gangs.reserve(exp_id, head, nodes, 2, 8)

    for _ in range(20):
        store.r.flushall()
        results.clear()
        threads = [threading.Thread(target=grab, args=("x", nodes[0])),
                   threading.Thread(target=grab, args=("y", nodes[1]))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [k for k, v in results.items() if v is not None]
        assert len(winners) == 1, results
        owners = set(store.slots.gpu_owners("a").values()) | set(store.slots.gpu_owners("b").values())
        assert owners == set(winners)  # the loser holds nothing anywhere (no deadlock possible)


def test_a_rank_is_driven_by_one_job_at_a_time(stores) -> None:
    store, gangs = stores
    assert gangs.claim_rank("g", 1, "job-a", 5, "b") is False  # no gang, no claim
    gangs.reserve("g", ("a", 8), [("b", 8)], 2, 8)
    assert gangs.claim_rank("g", 1, "job-a", 5, "c") is False  # rank 1 is not placed on c
    assert gangs.claim_rank("g", 1, "job-a", 5, "b") is True
    assert gangs.claim_rank("g", 1, "job-b", 5, "b") is False
    assert gangs.set_rank("g", 1, "job-b", {"state": "running"}) is False
    assert gangs.set_rank("g", 1, "job-a", {"state": "running", "attempt": 1}) is True
    store.r.hset(gang_key("g"), "r1:lease", "0")  # job-a's lease ran out
    assert gangs.claim_rank("g", 1, "job-b", 5, "b") is True
    gang = gangs.get("g")
    assert gang is not None and gang.rank_owner(1) == "job-b" and gang.rank_state(1)["attempt"] == 1
    assert gangs.set_launch("g", {"attempt": 2, "phase": "launch", "master_port": 1234})
    assert gangs.set_phase("g", "stop") and gangs.get("g").launch == {  # type: ignore[union-attr]
        "attempt": 2, "phase": "stop", "master_port": 1234}
    assert gangs.set_phase("nope", "stop") is False and not store.r.exists(gang_key("nope"))


def test_submission_refuses_only_what_no_set_of_live_nodes_could_hold(redis_url: str, tmp_path) -> None:
    from ajet_runner.service.submit import SubmissionRejected, submit
    from tests.integration.scenario import make

    store = Store.from_url(redis_url)

    def gang_blueprint(name: str, nnodes: int, per_node: int) -> str:
        sc = make("demo", tmp_path / name)
        y = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
        y.write_text(y.read_text().replace("nnodes: 1", f"nnodes: {nnodes}")
                     .replace("n_gpus_per_node: 8", f"n_gpus_per_node: {per_node}"))
        return sc.blueprint.read_text()

    for name, gpus in (("a", 8), ("b", 8), ("small", 4)):
        store.nodes.heartbeat(name, {"gpus": gpus, "gpus_busy": 0, "slots": 2}, ttl=2)
    store.slots.reserve_gpus("a", "busy", 8, 8)  # busy now: a gang that fits later waits queued
    rec = submit(store, gang_blueprint("fits", 2, 8))
    assert rec["state"] == "queued" and rec["nnodes"] == "2" and rec["gpus_per_node"] == "8"
    assert rec["gpus_needed"] == "16"
    for name, nnodes, per_node, node, words in (
        ("three", 3, 8, None, "needs 3 nodes with 8 GPUs each"),
        ("wide", 2, 16, None, "only 0 live node(s) have 16 GPUs"),
        ("head", 2, 8, "small", "the named head node small has fewer than 8 GPUs"),
    ):
        with pytest.raises(SubmissionRejected) as refused:
            submit(store, gang_blueprint(name, nnodes, per_node), node=node)
        assert refused.value.status == 409 and words in str(refused.value), str(refused.value)
        assert "ajet-runner worker --node <name>" in str(refused.value) and "DaemonSet" in str(refused.value)
    assert submit(store, gang_blueprint("three-small", 3, 4))["state"] == "queued"  # a, b and small


def test_a_submission_may_name_the_gangs_nodes(redis_url: str, tmp_path) -> None:
    from ajet_runner.service.submit import SubmissionRejected, submit
    from ajet_runner.store.settings import Settings
    from ajet_runner.workers.gang.head import gang_head
    from ajet_runner.workers.identity.this_node import NodeInfo
    from tests.integration.scenario import make

    store = Store.from_url(redis_url)
    sc = make("demo", tmp_path / "g")
    y = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    y.write_text(y.read_text().replace("nnodes: 1", "nnodes: 2"))
    for name in ("a", "b", "c"):
        store.nodes.heartbeat(name, {"gpus": 8, "gpus_busy": 0, "slots": 2}, ttl=2)
    with pytest.raises(SubmissionRejected, match="names 1 node"):
        submit(store, sc.blueprint.read_text(), nodes=["a"])
    with pytest.raises(SubmissionRejected, match="no live worker serves node zz"):
        submit(store, sc.blueprint.read_text(), nodes=["a", "zz"])
    with pytest.raises(SubmissionRejected, match="the first of nodes"):
        submit(store, sc.blueprint.read_text(), nodes=["a", "c"], node="b")
    rec = submit(store, sc.blueprint.read_text(), nodes=["c", "a"])
    assert rec["target_node"] == "c" and rec["queue"] == "node:c" and rec["target_nodes"] == "c,a"
    # The head on c reserves only among the named nodes: b stays free even though it comes first.
    typed = store.records.get(rec["id"])
    assert typed is not None and typed.nnodes == 2 and typed.target_nodes == "c,a"
    head = gang_head(store, typed, Settings(redis_url=redis_url), NodeInfo(name="c", gpus=8, slots=2),
                     renew=lambda: None, cancelled=lambda: False)
    assert head is not None and [n for n, _ in head.candidates()] == ["a"]
    assert head.reserve() == list(range(8))
    assert store.slots.gpu_owners("b") == {} and set(store.slots.gpu_owners("a").values()) == {rec["id"]}


def test_nodes_without_managed_gpus_take_part_without_a_reservation(stores) -> None:
    store, gangs = stores
    gang = gangs.reserve("cpu", ("a", 0), [("b", 0), ("c", 0)], 2, 8)
    assert gang is not None and gang.nodes == ["a", "b"] and gang.gpus == {"a": [], "b": []}
    assert store.slots.gpu_owners("a") == {} and gangs.release("cpu") == {"a": [], "b": []}


def test_a_single_cpu_node_cannot_hold_a_two_node_run(redis_url: str, tmp_path) -> None:
    from ajet_runner.service.submit import SubmissionRejected, submit
    from tests.integration.scenario import make

    store = Store.from_url(redis_url)
    sc = make("demo", tmp_path / "g")
    y = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    y.write_text(y.read_text().replace("nnodes: 1", "nnodes: 2"))
    store.nodes.heartbeat("only", {"gpus": 0, "gpus_busy": 0, "slots": 2}, ttl=2)  # what `ajet-runner run` has
    with pytest.raises(SubmissionRejected, match=r"needs 2 nodes .* only 1 live node"):
        submit(store, sc.blueprint.read_text())


def test_a_member_keeps_a_running_gangs_gpus_and_frees_a_finished_ones(redis_url: str) -> None:
    from ajet_runner.store.settings import Settings
    from ajet_runner.workers.identity.this_node import NodeInfo
    from ajet_runner.workers.node.supervisor import NodeSupervisor

    store = Store.from_url(redis_url)
    gangs = GangStore(store.r)
    store.records.create("live", {"state": "running", "node": "a", "nnodes": 2}, {})
    store.records.create("done", {"state": "finished", "node": "a", "nnodes": 2}, {})
    assert gangs.reserve("live", ("a", 8), [("b", 8)], 2, 4) is not None
    assert gangs.reserve("done", ("a", 8), [("b", 8)], 2, 4) is not None
    member = NodeSupervisor(Settings(redis_url=redis_url), NodeInfo(name="b", gpus=8, slots=1), redis_url)
    member._release_stale_gpus()  # the record names the head (a): still not stale for the member b
    assert set(store.slots.gpu_owners("b").values()) == {"live"}
    assert set(store.slots.gpu_owners("a").values()) == {"live"}  # the finished gang: released on every node at once
    assert store.r.ttl(gang_key("done")) > 0 and store.r.ttl(gang_key("live")) == -1


def test_a_lost_members_rank_moves_to_a_node_with_room_all_or_nothing(stores) -> None:
    store, gangs = stores
    gangs.reserve("g", ("a", 8), [("b", 8)], 2, 8)
    gangs.claim_rank("g", 1, "job-b", 5, "b")
    gangs.set_rank("g", 1, "job-b", {"state": "running", "launch_id": "x"})
    store.slots.reserve_gpus("c", "other", 2, 8)  # c has only 6 free
    assert gangs.replace_members("g", ["b"], [("c", 8)]) is None
    assert set(store.slots.gpu_owners("b").values()) == {"g"}  # nothing changed
    moved = gangs.replace_members("g", ["b"], [("c", 8), ("d", 8)])
    assert moved is not None and moved.nodes == ["a", "d"] and moved.gpus == {"a": list(range(8)), "d": list(range(8))}
    assert store.slots.gpu_owners("b") == {} and set(store.slots.gpu_owners("d").values()) == {"g"}
    assert moved.rank_state(1) == {} and moved.rank_owner(1) == "" and moved.rank_lease(1) == 0
    assert gangs.claim_rank("g", 1, "job-b", 5, "b") is False  # the old node's job cannot take it back
    assert gangs.claim_rank("g", 1, "job-d", 5, "d") is True
    assert gangs.release("g") == {"a": list(range(8)), "d": list(range(8))}
