"""A queued experiment whose RQ job was popped and then dropped is queued again (found by `make chaos`).

A watcher that listens on several queues pops a job id with BLPOP (no intermediate list); killed
before it marks the job started, it leaves the job "queued" in no queue: RQ would never run or
fail it, and the experiment stayed queued for ever (1 of 200 in a chaos run). Real Redis, real RQ.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from rq.job import Job
from rq.queue import Queue
from rq.serializers import JSONSerializer
from rq.utils import now, utcformat

from ajet_runner.service.submit import submit
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from ajet_runner.workers.node.supervisor import LOST_JOB_SECONDS, NodeSupervisor
from ajet_runner.workers.node.this_node import NodeInfo
from tests.integration.scenario import make

pytestmark = [pytest.mark.integration]


def _job(store: Store, exp_id: str) -> Job:
    rec = store.get(exp_id)
    assert rec is not None
    return Job.fetch(str(rec["job_id"]), connection=store.r, serializer=JSONSerializer)


def _age(store: Store, job: Job, seconds: float) -> None:
    store.r.hset(job.key, "enqueued_at", utcformat(now() - timedelta(seconds=seconds)))


def test_a_job_popped_and_dropped_by_a_killed_slot_is_queued_again(tmp_path, redis_url) -> None:
    store = Store.from_url(redis_url)
    exp_id = submit(store, make("demo", tmp_path).blueprint.read_text())["id"]
    job = _job(store, exp_id)
    queue = Queue(job.origin, connection=store.r)
    sup = NodeSupervisor(Settings(redis_url=redis_url), NodeInfo(name="n1", gpus=0, slots=1), redis_url)

    _age(store, job, LOST_JOB_SECONDS + 5)  # old, but still waiting in its queue: left alone
    assert sup._requeue_lost_jobs(store.unfinished(), 0.0) == []

    assert store.r.lrem(queue.key, 1, job.id) == 1  # what BLPOP does; the slot then dies
    _age(store, job, 5)  # a live slot marks it started within moments: not yet lost
    assert sup._requeue_lost_jobs(store.unfinished(), 0.0) == []
    assert _job(store, exp_id).id == job.id

    _age(store, job, LOST_JOB_SECONDS + 5)
    assert sup._requeue_lost_jobs(store.unfinished(), 0.0) == [exp_id]
    again = _job(store, exp_id)
    assert again.id != job.id and queue.get_job_position(again.id) is not None
    assert any(e.get("type") == "requeued" and e.get("job") == job.id and "QUEUED" in e.get("status", "")
               for e in store.events(exp_id))
    assert sup._requeue_lost_jobs(store.unfinished(), 0.0) == []  # the new job waits in its queue
