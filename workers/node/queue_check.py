"""The queue's health, checked by one supervisor per cluster: lost drive jobs queued again, queued work
for an absent node reported.

Every node used to read the whole queue and fetch each queued RQ job every scan (98 ms and 697 kB per
scan per node at 1,000 queued; one Redis core full at ~49 nodes during a 2,000-run sweep). Now the
supervisors elect one holder with a Redis lease (store/lease.py): it alone looks, and a Lua script
(store/per_experiment/queue_health.py) hands it only the records whose job is not waiting in its queue, so even its
look costs bytes in proportion to what is wrong, not to what is queued. The others renew nothing and
read nothing here: one round trip a scan to learn the lease is held. When the holder dies the lease
lapses and the next supervisor to scan takes over.
"""

from __future__ import annotations

import logging
import os
import time
import uuid

from rq.exceptions import NoSuchJobError
from rq.job import Job, JobStatus
from rq.queue import Queue

from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.store.lease import ClusterLease
from ajet_runner.store.naming import DEFAULT_QUEUE
from ajet_runner.store.per_experiment.queue_health import QueueSuspects
from ajet_runner.store.store import Store
from ajet_runner.workers.node.absent_nodes import NODE_ALIVE_SECONDS, REPORTED_FIELD, report_absent_nodes

log = logging.getLogger(__name__)
LEASE_NAME = "queue_check"
LEASE_SECONDS = 10.0  # > 3 scans (ADOPT_SCAN_SECONDS): a live holder never loses it; a dead one's lapses
DEAD_JOB = {JobStatus.FAILED, JobStatus.STOPPED, JobStatus.CANCELED, JobStatus.FINISHED}
LOST_JOB_SECONDS = 60.0  # a started job whose record is still unclaimed this long after: its horse is gone


def _popped_and_dropped(job: Job, status: JobStatus | None) -> bool:
    """A job still "queued" but in no queue, long after it was enqueued: a slot listening on several
    queues pops the id (BLPOP, no intermediate list) and was killed before marking it started, so
    RQ itself would never run or fail it (seen in `make chaos`: one of 200 stayed queued for ever)."""
    if status != JobStatus.QUEUED or job.enqueued_at is None:
        return False
    if time.time() - job.enqueued_at.timestamp() <= LOST_JOB_SECONDS:
        return False
    queue = Queue(job.origin, connection=job.connection)
    return queue.get_job_position(job.id) is None and job.id not in queue.intermediate_queue.get_job_ids()


def _job_lost(store: Store, rec: dict[str, str]) -> tuple[bool, JobStatus | None]:
    """(lost, its RQ status): dead, missing (past a young record's grace), started long ago but never
    claimed, or popped and dropped."""
    try:
        job = store.jobs.fetch_job(rec["job_id"])
    except NoSuchJobError:
        # A submission adds the job once its result dir is archived (service/submit.py): a young
        # record's job may simply not be there yet.
        return time.time() - float(rec.get("created_at") or 0) >= LOST_JOB_SECONDS, None
    status = job.get_status(refresh=False)
    started = job.started_at.timestamp() if job.started_at else None
    stuck = (status == JobStatus.STARTED and started is not None
             and time.time() - started > LOST_JOB_SECONDS) or _popped_and_dropped(job, status)
    return status in DEAD_JOB or stuck, status


def _unclaimed_lost(rec: dict[str, str], job_id: str) -> bool:
    """A queued record the scan marked as having lost its job, that no driver has claimed."""
    return rec.get("job_lost") == "1" and rec.get("state") == "queued" and bool(job_id) and not rec.get("owner")


def requeue_lost_jobs(store: Store, suspects: list[dict[str, str]], now: float) -> list[str]:
    """Queue again each suspect whose RQ job died before any driver claimed it (a slot or work-horse killed
    between dequeue and claim: RQ marks the job failed/abandoned and nothing else would ever run it)."""
    requeued = []
    for rec in suspects:
        job_id = rec.get("job_id") or ""
        if not _unclaimed_lost(rec, job_id):
            continue
        lost, status = _job_lost(store, rec)
        if not lost or not store.records.set_once(rec["id"], f"requeued:{job_id}", now):
            continue  # alive, or another checker (an old holder finishing its pass) did it
        store.jobs.enqueue_drive(rec["id"], rec.get("queue") or DEFAULT_QUEUE, at_front=True,
                                 max_seconds=float(rec.get("max_seconds") or 0) or None)
        store.events.publish(rec["id"], {"type": EventType.requeued, "job": job_id,
                                         "status": str(status or "missing"),
                                         "message": "its job died before any worker claimed it: queued again"})
        requeued.append(rec["id"])
    return requeued


class QueueChecker:
    """One per supervisor; `run()` at every scan does the cluster's check only while this one holds the lease."""

    def __init__(self, store: Store, node: str, absent_report_seconds: float,
                 lease_seconds: float = LEASE_SECONDS) -> None:
        self.store = store
        self.absent_report_seconds = absent_report_seconds
        self.lease = ClusterLease.on(store, LEASE_NAME, f"{node}/{os.getpid()}/{uuid.uuid4().hex[:6]}",
                                     lease_seconds)
        self.suspects = QueueSuspects(store, REPORTED_FIELD)
        self.checks = 0  # passes done while holding the lease (tests, bench)

    def run(self, now: float) -> list[str] | None:
        """The experiments queued again by this pass; None when another supervisor holds the lease."""
        if not self.lease.hold():
            return None
        return self.check(now)

    def check(self, now: float) -> list[str]:
        """The check itself (the caller holds the lease): absent nodes reported, lost jobs queued again."""
        self.checks += 1
        seen = {n["name"]: float(n.get("last_seen") or 0) or None for n in self.store.nodes.all()}
        alive = [name for name, last in seen.items() if last is not None and now - last < NODE_ALIVE_SECONDS]
        suspects = self.suspects(alive)
        if not suspects:
            return []
        report_absent_nodes(self.store, suspects, now, self.absent_report_seconds, seen=seen)
        return requeue_lost_jobs(self.store, suspects, now)

    def leave(self) -> None:
        """A clean exit: hand the lease over now rather than when it lapses."""
        self.lease.release()
