"""A queued experiment whose RQ job was lost is queued again, by the one supervisor holding the cluster's
queue-check lease (workers/node/queue_check.py). Real Redis, real RQ.

Found by `make chaos`: a watcher that listens on several queues pops a job id with BLPOP (no
intermediate list); killed before it marks the job started, it leaves the job "queued" in no queue:
RQ would never run or fail it, and the experiment stayed queued for ever (1 of 200 in a chaos run).
A job RQ failed (its horse killed between dequeue and claim) or a job that vanished is queued again too.
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from rq.job import Job, JobStatus
from rq.queue import Queue
from rq.serializers import JSONSerializer
from rq.utils import now, utcformat

from ajet_runner.service.submit import submit
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from ajet_runner.workers.identity.this_node import NodeInfo
from ajet_runner.workers.node.queue_check import LOST_JOB_SECONDS, QueueChecker
from ajet_runner.workers.node.supervisor import NodeSupervisor
from tests.integration.scenario import make

pytestmark = [pytest.mark.integration]


def _job(store: Store, exp_id: str) -> Job:
    rec = store.records.raw(exp_id)
    assert rec is not None
    return Job.fetch(str(rec["job_id"]), connection=store.r, serializer=JSONSerializer)


def _age(store: Store, job: Job, seconds: float) -> None:
    store.r.hset(job.key, "enqueued_at", utcformat(now() - timedelta(seconds=seconds)))


def _supervisor(redis_url: str, name: str) -> NodeSupervisor:
    return NodeSupervisor(Settings(redis_url=redis_url), NodeInfo(name=name, gpus=0, slots=1), redis_url)


def _requeued_event(store: Store, exp_id: str, job: Job, status: str) -> bool:
    return any(e.get("type") == "requeued" and e.get("job") == job.id and status in e.get("status", "")
               for e in store.events.read(exp_id))


def test_a_job_popped_and_dropped_by_a_killed_slot_is_queued_again(tmp_path, redis_url) -> None:
    store = Store.from_url(redis_url)
    exp_id = submit(store, make("demo", tmp_path).blueprint.read_text())["id"]
    job = _job(store, exp_id)
    queue = Queue(job.origin, connection=store.r)
    check = _supervisor(redis_url, "n1").queue_check

    _age(store, job, LOST_JOB_SECONDS + 5)  # old, but still waiting in its queue: left alone
    assert check.run(store.server_time()) == []
    assert check.suspects([]) == []  # and not even read back: it is healthy

    assert store.r.lrem(queue.key, 1, job.id) == 1  # what BLPOP does; the slot then dies
    _age(store, job, 5)  # a live slot marks it started within moments: not yet lost
    assert check.run(store.server_time()) == []
    assert _job(store, exp_id).id == job.id

    _age(store, job, LOST_JOB_SECONDS + 5)
    assert check.run(store.server_time()) == [exp_id]
    again = _job(store, exp_id)
    assert again.id != job.id and queue.get_job_position(again.id) is not None
    assert _requeued_event(store, exp_id, job, "QUEUED")
    assert check.run(store.server_time()) == []  # the new job waits in its queue


def test_a_failed_job_and_a_vanished_one_are_queued_again(tmp_path, redis_url) -> None:
    store = Store.from_url(redis_url)
    failed = submit(store, make("demo", tmp_path / "a").blueprint.read_text())["id"]
    vanished = submit(store, make("demo", tmp_path / "b").blueprint.read_text())["id"]
    check = _supervisor(redis_url, "n1").queue_check
    fjob, vjob = _job(store, failed), _job(store, vanished)
    for job in (fjob, vjob):
        Queue(job.origin, connection=store.r).remove(job.id)  # popped by a slot
    fjob.set_status(JobStatus.FAILED)  # its work-horse was killed before the driver claimed the record
    vjob.delete()
    assert check.run(store.server_time()) == [failed]  # a young record's job may not be there yet
    store.records.update(vanished, {"created_at": time.time() - LOST_JOB_SECONDS - 5})
    assert check.run(store.server_time()) == [vanished]
    assert _requeued_event(store, failed, fjob, "FAILED") and _requeued_event(store, vanished, vjob, "missing")
    assert check.run(store.server_time()) == []


def _commands(store: Store) -> set[str]:
    return {k.removeprefix("cmdstat_") for k in store.r.info("commandstats")} - {"config|resetstat", "info"}


def test_one_supervisor_checks_the_queue_and_another_takes_over_when_it_dies(tmp_path, redis_url) -> None:
    store = Store.from_url(redis_url)
    for k in range(2):
        submit(store, make("demo", tmp_path / str(k)).blueprint.read_text())
    a, b = _supervisor(redis_url, "n1"), _supervisor(redis_url, "n2")
    lease = 0.6
    a.queue_check.lease.seconds = b.queue_check.lease.seconds = lease
    assert a.queue_check.run(store.server_time()) == []
    t = store.server_time()
    b.queue_check.run(t)  # its script is loaded: now count what a pass costs it
    store.r.config_resetstat()
    for _ in range(3):
        assert b.queue_check.run(t) is None  # a holds the lease: b reads nothing
    assert _commands(store) <= {"evalsha", "get"}, "the other supervisor read the queue"
    assert (a.queue_check.checks, b.queue_check.checks) == (1, 0)

    # a dies (it renews no more): b takes the check over within the lease
    died = time.monotonic()
    while b.queue_check.run(store.server_time()) is None:
        assert time.monotonic() - died < lease + 0.5, "b never took the lease over"
        time.sleep(0.05)
    assert lease * 0.5 < time.monotonic() - died < lease + 0.5
    assert b.queue_check.lease.current() == b.queue_check.lease.holder
    assert a.queue_check.run(store.server_time()) is None  # a back to life: b keeps it

    b.queue_check.leave()  # a clean exit hands it over at once
    assert a.queue_check.run(store.server_time()) == []


def test_work_queued_for_an_absent_node_is_reported_once_by_the_checker(tmp_path, redis_url) -> None:
    store = Store.from_url(redis_url)
    ghost = submit(store, make("demo", tmp_path / "a").blueprint.read_text(), node="ghost",
                   wait_for_node=True)["id"]
    other = submit(store, make("demo", tmp_path / "b").blueprint.read_text())["id"]
    check = QueueChecker(store, "n1", absent_report_seconds=0.0)
    assert [r["id"] for r in check.suspects(["n1"])] == [ghost]  # its job waits, but for a node gone
    assert check.suspects(["ghost"]) == []
    for _ in range(2):
        assert check.run(store.server_time() + 1) == []  # reported, not queued again: its job waits
    assert [e["node"] for e in store.events.read(ghost) if e.get("type") == "node_absent"] == ["ghost"]
    assert not [e for e in store.events.read(other) if e.get("type") == "node_absent"]
    assert check.suspects([]) == []  # once reported, no longer read
