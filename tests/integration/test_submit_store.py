"""A submission in a real Redis: the result dir's claim, the record, its event and its indexes appear together
(one compare-and-set), its RQ job once the dir is archived; the checks read nodes, drains and the result
dir's holder in one script call; a refused submission writes nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from rq.job import Job
from rq.serializers import JSONSerializer

from ajet_runner.service.submit import SubmissionRejected, submit
from ajet_runner.store.keys import INDEX, RESULT_DIRS, state_index_key
from ajet_runner.store.per_experiment.queue import DRIVE_JOB, queue
from ajet_runner.store.store import Store
from tests.integration.scenario import make

pytestmark = pytest.mark.integration


def test_a_submission_writes_record_event_indexes_and_job_together(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    text = make("demo", tmp_path / "a").blueprint.read_text()
    rec = submit(store, text)
    exp_id = rec["id"]
    assert rec == store.records.raw(exp_id)  # what submit returns is the record as stored
    assert rec["state"] == "queued" and rec["version"] == "1" and rec["queue"] == "default"
    assert rec["lifecycle"]["state"] == "queued" and rec["lifecycle"]["history"] == []
    job = Job.fetch(rec["job_id"], connection=store.r, serializer=JSONSerializer)
    assert job.func_name == DRIVE_JOB and job.args == [exp_id] and job.get_status() == "queued"
    assert queue(store.r, "default").job_ids == [rec["job_id"]]
    assert [e["type"] for e in store.events.read(exp_id)] == ["submitted"]
    assert store.r.zscore(state_index_key("queued"), exp_id) is not None
    assert store.r.zscore(INDEX, exp_id) is not None
    assert store.r.hget(RESULT_DIRS, os.path.realpath(rec["result_dir"])) == exp_id.encode()


def test_the_submission_view_reads_nodes_drains_and_the_holder(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    store.nodes.heartbeat("gpu-b", {"gpus": 8, "gpus_busy": 0, "slots": 2}, ttl=2)
    store.nodes.heartbeat("gpu-a", {"gpus": 4, "gpus_busy": 1, "slots": 1}, ttl=2)
    store.nodes.set_drain("gpu-b", by="ops@x", reason="disk", sticky=True)
    holder, nodes = store.result_dirs.submission_view("/no/such/dir")
    assert holder is None and nodes == store.nodes.all() and [n["name"] for n in nodes] == ["gpu-a", "gpu-b"]
    assert nodes[1]["drain"]["by"] == "ops@x" and nodes[0]["drain"] is None
    rec = submit(store, make("demo", tmp_path / "b").blueprint.read_text())
    real = os.path.realpath(rec["result_dir"])
    assert store.result_dirs.submission_view(real)[0] == (rec["id"], "queued")
    store.r.hset(f"ajet:exp:{rec['id']}", "state", "finished")
    assert store.result_dirs.submission_view(real)[0] is None  # a finished holder frees the dir


def test_a_refused_submission_writes_nothing(redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    text = make("demo", tmp_path / "c").blueprint.read_text()
    first = submit(store, text)
    before = (store.r.zcard(INDEX), store.r.llen("rq:queue:default"), store.r.xlen("ajet:events"))
    with pytest.raises(SubmissionRejected) as refused:
        submit(store, text)  # the same result dir, still queued
    assert refused.value.status == 409 and first["id"] in str(refused.value)
    assert (store.r.zcard(INDEX), store.r.llen("rq:queue:default"), store.r.xlen("ajet:events")) == before
