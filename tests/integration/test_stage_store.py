"""Stages and the outbox in a real Redis: the stage index is written with the record (and only then), a
finishing transition queues exactly one notice in its own MULTI, a stage is reported once per membership,
and a task a dead deliverer held is taken again when its lease runs out."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.store.cluster.outbox import EXPERIMENT_FINISHED, STAGE_FINISHED, Outbox
from ajet_runner.store.cluster.stages import (
    StageNameError,
    add_to_stage,
    define_stage,
    stage_ids,
    stage_meta,
    stage_names,
)
from ajet_runner.store.keys import OUTBOX, OUTBOX_TASKS, stage_key
from ajet_runner.store.store import ResultDirTaken, Store, TransitionConflict

pytestmark = pytest.mark.integration


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store(redis.Redis.from_url(redis_url), retention_seconds=0)


def _create(store: Store, exp_id: str, stage: str = "", result_dir: str = "") -> dict:
    result_dir = result_dir or f"/r/{exp_id}"
    fields = {"state": "queued", "lifecycle": Lifecycle.initial_dict(exp_id), "result_dir": result_dir,
              **({"stage": stage} if stage else {})}
    return store.records.create(exp_id, fields, {"message": "submitted"}, result_dir_key=result_dir)


def _finish(store: Store, exp_id: str, version: int, outcome: str = "completed") -> int:
    return store.records.transition(exp_id, expected_version=version, fields={"state": "finished", "outcome": outcome},
                                    event={"type": "transition", "to": "finished"})


def _tasks(store: Store) -> list[dict]:
    return [json.loads(v) for v in store.r.hvals(OUTBOX_TASKS)]


def test_the_stage_index_is_written_with_the_record_and_not_for_a_lost_claim(store: Store) -> None:
    _create(store, "e1", "s1", "/r/shared")
    with pytest.raises(ResultDirTaken):
        _create(store, "e2", "s1", "/r/shared")  # the same dir: the claim is lost, nothing is written
    assert stage_ids(store, "s1") == ["e1"] and stage_names(store) == ["s1"]
    assert store.records.raw("e2") is None and store.records.raw("e1")["stage"] == "s1"
    _create(store, "e3")  # no stage: no index
    assert stage_ids(store, "s1") == ["e1"]
    store.records.delete("e1")
    assert stage_ids(store, "s1") == []


def test_a_finishing_transition_queues_one_notice_and_a_replay_none(store: Store) -> None:
    rec = _create(store, "e1", "s1")
    v = store.records.transition("e1", expected_version=int(rec["version"]), fields={"state": "running"},
                                 event={"type": "transition"})
    assert _tasks(store) == []  # not finished: nothing to tell
    _finish(store, "e1", v)
    tasks = _tasks(store)
    assert [(t["kind"], t["id"]) for t in tasks] == [(EXPERIMENT_FINISHED, "e1")]
    with pytest.raises(TransitionConflict):
        _finish(store, "e1", v)  # a resend of the same transition (the reply was lost): no second notice
    store.records.transition("e1", expected_version=None, fields={"state": "finished"}, event={"type": "transition"})
    assert len(_tasks(store)) == 1  # a later write to a finished record: still one
    assert store.records.raw("e1")["finish_notified"] == tasks[0]["delivery"]


def test_a_stage_is_reported_once_per_membership(store: Store) -> None:
    outbox = Outbox(store.r)
    versions = {i: int(_create(store, i, "s1")["version"]) for i in ("a", "b")}
    define_stage(store, "s1", directory="/r")
    _finish(store, "a", versions["a"])
    assert not outbox.check_stage("s1")  # b is not finished
    _finish(store, "b", versions["b"])
    assert outbox.check_stage("s1") and not outbox.check_stage("s1")  # once
    assert [t["kind"] for t in _tasks(store)].count(STAGE_FINISHED) == 1
    c = int(_create(store, "c", "s1")["version"])  # the stage grows ...
    assert not outbox.check_stage("s1")
    _finish(store, "c", c)
    assert outbox.check_stage("s1")  # ... and finishes again: reported again
    assert stage_meta(store, "s1")["reported_members"] == "3" and stage_meta(store, "s1")["dir"] == "/r"


def test_stage_add_moves_records_between_stages_and_names_the_missing(store: Store) -> None:
    _create(store, "a", "old")
    _create(store, "b")
    assert add_to_stage(store, "new", ["a", "b", "ghost"]) == ["ghost"]
    assert stage_ids(store, "new") == ["a", "b"] and stage_ids(store, "old") == []
    assert store.records.raw("a")["stage"] == "new"
    with pytest.raises(StageNameError):
        add_to_stage(store, "bad name", ["a"])
    assert store.r.exists(stage_key("bad name")) == 0


def test_a_task_held_by_a_dead_deliverer_is_taken_again_after_its_lease(store: Store) -> None:
    outbox = Outbox(store.r)
    v = int(_create(store, "e1")["version"])
    _finish(store, "e1", v)
    first = outbox.claim(lease_seconds=1.0)
    assert first is not None and first[1]["id"] == "e1"
    assert outbox.claim(lease_seconds=1.0) is None  # held
    time.sleep(1.1)  # the holder died without acknowledging: its lease runs out
    again = outbox.claim(lease_seconds=30.0)
    assert again is not None and again[0] == first[0]
    outbox.later(again[0], {**again[1], "attempts": 1}, 0.0)
    assert outbox.claim(lease_seconds=30.0)[1]["attempts"] == 1  # type: ignore[index]
    outbox.give_up(again[0], again[1], "test")
    assert outbox.pending() == 0 and outbox.dead()[0]["given_up"] == "test"


def test_concurrent_finishes_of_a_stage_report_it_once(store: Store) -> None:
    """Every experiment's deliverer checks the stage: however they interleave, one stage task."""
    outbox = Outbox(store.r)
    ids = [f"e{i}" for i in range(8)]
    for i in ids:
        _finish(store, i, int(_create(store, i, "s")["version"]))
    results: list[bool] = []
    threads = [threading.Thread(target=lambda: results.append(Outbox(store.r).check_stage("s"))) for _ in ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1 and not outbox.check_stage("s")
    assert store.r.zcard(OUTBOX) == len(ids) + 1
