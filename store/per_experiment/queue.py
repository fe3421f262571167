"""The producer side of the job queue: putting an experiment's drive job on an RQ queue.

RQ only carries the experiment id (JSON serializer, never pickle); the job function is named by its
dotted path, so enqueueing never imports the worker code that runs it.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import TYPE_CHECKING

import redis
from redis.client import Pipeline
from rq import Queue
from rq.exceptions import InvalidJobOperation, NoSuchJobError
from rq.job import Job
from rq.serializers import JSONSerializer

from ajet_runner.store.naming import DEFAULT_QUEUE, node_queue, queue_names, target_queue
from ajet_runner.store.settings import get_settings

if TYPE_CHECKING:
    from ajet_runner.store.per_experiment.record_store import Records

__all__ = ["DEFAULT_QUEUE", "DRIVE_JOB", "JOB_MARGIN_SECONDS", "LEGACY_JOB_NAMES", "RANK_JOB", "Jobs", "drive_job_id",
           "job_timeout", "node_queue", "queue", "queue_names", "target_queue"]

DRIVE_JOB = "ajet_runner.workers.drive.jobs.drive"  # the consumer: drives one experiment (see workers/drive/jobs.py)
# a multi-node run's non-head rank on its node (workers/gang/rank.py)
RANK_JOB = "ajet_runner.workers.drive.jobs.drive_rank"
# The same jobs as queued before the package was one import package: a queue that outlives an upgrade still
# holds them, and the consumer runs them under their new names (workers/node/slot_worker.py).
LEGACY_JOB_NAMES = {"workers.jobs.drive": DRIVE_JOB, "workers.jobs.drive_rank": RANK_JOB}
JOB_MARGIN_SECONDS = 3600


def queue(conn: redis.Redis, name: str) -> Queue:
    return Queue(name, connection=conn, serializer=JSONSerializer)


def job_timeout(max_seconds: float | None) -> int:
    """Above the run's max time plus every grace period: RQ must never be the one to stop it."""
    if not max_seconds or max_seconds <= 0:
        return -1
    s = get_settings()
    return int(max_seconds + s.time_limit_grace_seconds + s.stop_grace_seconds + JOB_MARGIN_SECONDS)


def drive_job_id(exp_id: str) -> str:
    """A fresh RQ job id for the experiment's drive job (a relaunch or re-queue gets a new one)."""
    return f"drive-{exp_id}-{uuid.uuid4().hex[:6]}"


class Jobs:
    """The RQ jobs of this store's Redis: an experiment's drive job, a rank job, taking one back."""

    def __init__(self, client: redis.Redis, records: Records) -> None:
        self.r = client
        self.records = records  # the record notes its drive job's id and queue

    def enqueue_drive(self, exp_id: str, queue_name: str, *, at_front: bool = False,
                      max_seconds: float | None = None, job_id: str = "", pipeline: Pipeline | None = None) -> str:
        """Put the experiment's drive job on `queue_name` and note its job id in the record; returns the job id.

        With `pipeline` (a MULTI the caller executes), only the job is added to it: the caller writes `job_id`
        (and `queue`) into the record in the same transaction, so a record and its job appear together."""
        job_id = job_id or drive_job_id(exp_id)
        if pipeline is None:
            self.records.update(exp_id, {"job_id": job_id, "queue": queue_name})
        queue(self.r, queue_name).enqueue(
            DRIVE_JOB, exp_id, job_id=job_id, job_timeout=job_timeout(max_seconds),
            result_ttl=86400, failure_ttl=7 * 86400, at_front=at_front, description=f"drive {exp_id}",
            pipeline=pipeline,
        )
        return job_id

    def enqueue_rank(self, exp_id: str, rank: int, node: str, max_seconds: float | None = None) -> str:
        """A multi-node run's rank job, on that rank's node's own queue, ahead of new work; returns the job id."""
        job_id = f"rank-{exp_id}-{rank}-{uuid.uuid4().hex[:6]}"
        queue(self.r, node_queue(node)).enqueue(
            RANK_JOB, exp_id, rank, job_id=job_id, job_timeout=job_timeout(max_seconds),
            result_ttl=86400, failure_ttl=7 * 86400, at_front=True, description=f"rank {rank} of {exp_id}",
        )
        return job_id

    def remove_queued(self, job_id: str, queue_name: str) -> bool:
        """Take a drive job out of its queue (and cancel it in RQ); True if it was still waiting there."""
        if not job_id or not queue_name:
            return False
        removed = bool(queue(self.r, queue_name).remove(job_id))
        if removed:
            with contextlib.suppress(NoSuchJobError, InvalidJobOperation):
                self.fetch_job(job_id).cancel()
        return removed

    def fetch_job(self, job_id: str) -> Job:
        """The RQ job (raises rq's NoSuchJobError when it is gone)."""
        return Job.fetch(job_id, connection=self.r, serializer=JSONSerializer)
