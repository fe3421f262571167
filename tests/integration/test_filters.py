"""Every filter the API and console offer, read from indexes, returns exactly what a full scan of the
records returns: random records driven through random transitions (adoption, outcomes, stages), the
purpose search window by window, the expiry after the retention time, and the upgrade's backfill."""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

import pytest
import redis
from fastapi.testclient import TestClient

from ajet_runner.service.api.application import create_app
from ajet_runner.statemachine.lifecycle import Outcome, State
from ajet_runner.store.cluster.stages import add_to_stage
from ajet_runner.store.keys import (
    EXPIRING,
    EXPIRING_WHERE,
    INDEX,
    PURPOSES,
    exp_key,
    node_index_key,
    node_outcome_key,
    node_state_key,
    outcome_index_key,
    stage_key,
    state_index_key,
)
from ajet_runner.store.per_experiment.filters import VERSION_KEY, Query, purpose_matches
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from tests.integration.scenario import wait_for

pytestmark = [pytest.mark.integration]

NODES = ("n1", "n2", "n3")
STAGES = ("s1", "s2")
STATES = tuple(s.value for s in State)
OUTCOMES = tuple(o.value for o in Outcome)
WORDS = ("GRPO", "ppo", "Math", "sweep", "lr=3e-4", "Ünïcode", "")
TOKEN = "t-filters-0123456789"


@pytest.fixture()
def store(redis_url: str) -> Iterator[Store]:
    s = Store(redis.Redis.from_url(redis_url), retention_seconds=3600)
    yield s
    s.r.close()


def world(store: Store, rng: random.Random, count: int) -> None:
    """`count` records, each driven some way along the lifecycle: launched on a node (its target or any),
    adopted by another node, collected with an outcome, finished; some cancelled while queued."""
    for i in range(count):
        exp_id = f"e{i:03d}"
        target = rng.choice(["", "", *NODES])
        stage = rng.choice(["", *STAGES])
        purpose = " ".join(rng.sample(WORDS, 2)).strip()
        store.records.create(exp_id, {"state": "queued", "target_node": target, "purpose": purpose,
                                      **({"stage": stage} if stage else {})}, {})
        if rng.random() < 0.1:
            store.records.transition(exp_id, expected_version=None,
                                     fields={"state": "finished", "outcome": "cancelled"}, event={"type": "transition"})
            continue
        node = target or rng.choice(NODES)
        steps: list[tuple[dict[str, str], str]] = [({"state": "launching", "node": node}, node),
                                                   ({"state": "running"}, node)]
        if rng.random() < 0.3:
            node = rng.choice([n for n in NODES if n != node])
            steps.append(({"node": node}, node))  # adopted by another node's supervisor
        if rng.random() < 0.3:
            steps.append(({"state": "failing"}, node))
        steps += [({"state": "collecting", "outcome": rng.choice(OUTCOMES)}, node), ({"state": "finished"}, node)]
        for fields, acting in steps[:rng.randint(0, len(steps))]:
            store.records.transition(exp_id, expected_version=None, fields=fields, event={"type": "transition"},
                                     node=acting)


def full_scan(store: Store) -> list[dict[str, str]]:
    """Every record, read from the hashes themselves (SCAN, not an index), newest first."""
    recs = []
    for key in store.r.scan_iter(match=exp_key("*"), count=1000):
        if key.count(b":") == 2 and store.r.type(key) == b"hash":
            raw = {k.decode(): v.decode() for k, v in store.r.hgetall(key).items()}
            recs.append(raw)
    return sorted(recs, key=lambda r: (float(r["created_at"]), r["id"]), reverse=True)


def matching(recs: list[dict[str, str]], q: Query, needle: str = "") -> list[str]:
    out = []
    for r in recs:
        if q.state and r["state"] != q.state:
            continue
        if q.outcome and not (r["state"] == "finished" and r.get("outcome") == q.outcome):
            continue
        if q.node and (r.get("node") or r.get("target_node") or "") != q.node:
            continue
        if q.stage and r.get("stage", "") != q.stage:
            continue
        if needle and not purpose_matches(r.get("purpose", ""), needle):
            continue
        out.append(r["id"])
    return out


def some_queries(rng: random.Random, combined: int = 60) -> list[Query]:
    """No filter, each filter value alone, and `combined` random combinations of them (of the 720)."""
    values = (("", *STATES), ("", *NODES, "nowhere"), ("", *OUTCOMES), ("", *STAGES))
    every = [Query(*v) for v in itertools.product(*values)]
    alone = [q for q in every if sum(map(bool, (q.state, q.node, q.outcome, q.stage))) <= 1]
    return alone + rng.sample([q for q in every if q not in alone], combined)


def assert_filters_match_a_full_scan(store: Store, rng: random.Random, combined: int = 40) -> None:
    recs = full_scan(store)
    for q in some_queries(rng, combined):
        want = matching(recs, q)
        assert store.indexes.page(q, 0, 1000) == (want, len(want)), q
        if len(want) > 3 and rng.random() < 0.2:  # pages: every match once, in order
            size = rng.randint(1, 4)
            got = [i for off in range(0, len(want) + size, size) for i in store.indexes.page(q, off, size)[0]]
            assert got == want, q


def test_every_filter_and_combination_returns_what_a_full_scan_returns(store: Store) -> None:
    rng = random.Random(27)
    world(store, rng, 50)
    add_to_stage(store, "s2", ["e000", "e001", "e002"])  # moved after the fact (stage_add.lua)
    recs = full_scan(store)
    assert {r["state"] for r in recs} >= {"queued", "running", "finished"}  # the world covers the filters
    assert any(r.get("node") and r.get("target_node") and r["node"] != r["target_node"] for r in recs)  # adopted
    assert_filters_match_a_full_scan(store, rng)
    assert not store.r.exists("ajet:tmp:filter")  # the scratch key of an intersection never stays


def test_a_node_that_a_run_left_no_longer_lists_it(store: Store) -> None:
    store.records.create("a", {"state": "queued", "target_node": "n1"}, {})
    store.records.transition("a", expected_version=None, fields={"state": "running", "node": "n1"}, event={}, node="n1")
    store.records.transition("a", expected_version=None, fields={"node": "n2"}, event={"type": "adopted"}, node="n2")
    assert store.indexes.ids_in(node="n1") == ([], 0) and store.indexes.ids_in(node="n2") == (["a"], 1)
    store.records.transition("a", expected_version=None, fields={"state": "finished", "outcome": "failed"}, event={},
                             node="n2")
    assert store.indexes.ids_in(outcome="failed", node="n2") == (["a"], 1)
    assert store.indexes.ids_in(outcome="completed") == ([], 0)
    assert store.indexes.ids_in(state="running", outcome="failed") == ([], 0)  # an outcome is a finished one's


def test_the_purpose_search_reads_one_bounded_window_at_a_time(store: Store) -> None:
    rng = random.Random(5)
    world(store, rng, 40)
    recs = full_scan(store)
    for needle, q in itertools.product(("grpo", "MATH", "ünïcode", "Ünïcode", "3e-4", "nothing like it"),
                                       (Query(), Query(state="finished"), Query(node="n2", stage="s1"))):
        candidates, hits = matching(recs, q), matching(recs, q, needle)
        found: list[str] = []
        before, searched, windows = "", 0, 0
        while True:
            win = store.indexes.search(q, needle, before, window=9)
            assert win.candidates == len(candidates) and win.searched <= 9 and win.before == before
            assert win.partial == (bool(before) or win.next_before is not None)
            found += win.ids
            searched += win.searched
            windows += 1
            if win.next_before is None:
                break
            before = win.next_before
        assert found == hits and searched == len(candidates), (needle, q)
        if len(q.keys() or []) == 1:  # one index: each window is 9 candidates
            assert windows == max(1, -(-len(candidates) // 9)), (needle, q)


def test_expired_records_leave_every_index_before_the_next_list(redis_url: str) -> None:
    store = Store(redis.Redis.from_url(redis_url), retention_seconds=1)
    store.records.create("gone", {"state": "queued", "target_node": "n1", "stage": "s1"}, {})
    store.records.create("kept", {"state": "queued", "target_node": "n1", "stage": "s1"}, {})
    store.records.transition("gone", expected_version=None, fields={"state": "running", "node": "n1"}, event={},
                             node="n1")
    store.records.transition("gone", expected_version=None, fields={"state": "finished", "outcome": "failed"}, event={},
                             node="n1")
    assert store.indexes.ids_in(outcome="failed", node="n1", stage="s1") == (["gone"], 1)
    assert store.r.zscore(EXPIRING, "gone") and store.r.hget(EXPIRING_WHERE, "gone") == b"n1\ns1"
    wait_for(lambda: store.indexes.ids_in(node="n1") == (["kept"], 1), 10,
             "the expired record to leave the node's list")
    assert store.indexes.ids_in() == (["kept"], 1) and store.indexes.ids_in(outcome="failed") == ([], 0)
    for key in (INDEX, state_index_key("finished"), outcome_index_key("failed"), node_index_key("n1"),
                node_state_key("n1", "finished"), node_outcome_key("n1", "failed"), stage_key("s1"), EXPIRING):
        assert store.r.zscore(key, "gone") is None, key
    assert not store.r.hexists(EXPIRING_WHERE, "gone")


def test_records_from_before_the_indexes_are_backfilled_once(store: Store) -> None:
    rng = random.Random(11)
    world(store, rng, 30)
    want = full_scan(store)
    # What an older version left: only its own indexes (no outcome index, no expiry schedule), a run adopted
    # away still in its first node's index, an index entry of a record that expired long ago.
    for key in [*(outcome_index_key(o) for o in OUTCOMES), EXPIRING, EXPIRING_WHERE, PURPOSES,
                *(node_state_key(n, s) for n in NODES for s in STATES),
                *(node_outcome_key(n, o) for n in NODES for o in OUTCOMES)]:
        store.r.delete(key)
    moved = next(r for r in want if r.get("node"))
    store.r.zadd(node_index_key("elsewhere" if moved["node"] != "elsewhere" else "x"), {moved["id"]: 1})
    store.r.zadd(state_index_key("running"), {"ghost": 1})
    store.r.zadd(INDEX, {"ghost": 1})
    store.r.zadd(node_index_key("n1"), {"ghost": 1})
    store.r.set(VERSION_KEY, 1)
    assert store.indexes.backfill()
    assert_filters_match_a_full_scan(store, rng, 25)
    assert store.r.zscore(INDEX, "ghost") is None and store.r.zscore(node_index_key("n1"), "ghost") is None
    finished = {r["id"] for r in want if r["state"] == "finished"}
    assert {m.decode() for m in store.r.zrange(EXPIRING, 0, -1)} == finished  # each will leave when it expires
    assert store.r.hlen(PURPOSES) == len(want)  # what the search reads
    assert not store.indexes.backfill()  # once
    store.indexes.backfill(force=True)  # and idempotent
    assert_filters_match_a_full_scan(store, rng, 10)


def test_the_api_and_the_console_filter_and_search_through_the_indexes(redis_url: str) -> None:
    settings = Settings(redis_url=redis_url, token=TOKEN, search_window=7)
    store = Store(redis.Redis.from_url(redis_url), retention_seconds=3600)
    world(store, random.Random(3), 30)
    recs = full_scan(store)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with TestClient(create_app(settings)) as api:
        for params in ({"outcome": "failed"}, {"state": "running", "node": "n1"},
                       {"node": "n2", "outcome": "completed"}, {"stage": "s1", "state": "queued"},
                       {"state": "queued", "outcome": "failed"}):
            got = api.get("/v1/experiments", params={**params, "limit": 3, "offset": 1}, headers=headers).json()
            want = matching(recs, Query(**params))
            assert [e["id"] for e in got["items"]] == want[1:4] and got["total"] == len(want), params
            assert got["search"] is None
        first = api.get("/v1/experiments", params={"q": "grpo"}, headers=headers).json()
        cursor = first["search"]["next_scan_before"]
        assert first["search"] == {"scan_before": None, "searched": 7, "candidates": 30, "partial": True,
                                   "next_scan_before": cursor} and cursor
        hits = matching(recs, Query(), "grpo")
        assert [e["id"] for e in first["items"]] == [i for i in hits if i in {r["id"] for r in recs[:7]}]
        found = [e["id"] for e in first["items"]]
        while cursor:
            older = api.get("/v1/experiments", params={"q": "grpo", "scan_before": cursor}, headers=headers).json()
            assert older["search"]["partial"] and older["search"]["scan_before"] == cursor
            found += [e["id"] for e in older["items"]]
            cursor = older["search"]["next_scan_before"]
        assert found == hits
        assert api.get("/v1/experiments", params={"q": "x", "scan_before": "soon"}, headers=headers).status_code == 422
        page = api.get("/ui/", params={"q": "grpo", "state": "finished"}, headers={**headers, "Accept": "text/html"})
        assert page.status_code == 200, page.text
        assert "Partial result" in page.text and "search older" in page.text and "scan=1" in page.text
        shown = api.get("/ui/fragments/experiments", params={"outcome": "failed", "node": "n1"}, headers=headers)
        want = matching(recs, Query(node="n1", outcome="failed"))
        assert shown.status_code == 200 and all(f'id="row-{i}"' in shown.text for i in want)
        assert shown.text.count('id="row-') == min(len(want), 25)
