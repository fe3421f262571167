"""The consumer side of the queue: the job function a worker runs (enqueueing is in store/queue.py).

RQ only carries the experiment id (JSON serializer, never pickle) and gives us a process to run
in; our own state in Redis decides what happens, so jobs have no RQ retries and a timeout
above the experiment's max time.
"""

from __future__ import annotations

import logging
import os
import uuid

import redis
from rq import get_current_job

from statemachine.lifecycle import State
from store.queue import DEFAULT_QUEUE, enqueue_drive, job_timeout, node_queue, queue, target_queue
from store.settings import get_settings
from store.store import Store, TransitionConflict
from workers.driver import ExperimentDriver
from workers.journal import LostOwnership, RedisUnavailable
from workers.lifeline import PARENT_ENV, die_with_parent, expected_parent_from_env
from workers.metrics import watch_reporter
from workers.node import NodeInfo

log = logging.getLogger(__name__)
__all__ = ["DEFAULT_QUEUE", "drive", "enqueue_drive", "job_timeout", "node_queue", "queue", "target_queue"]


def _connection_url(conn: redis.Redis) -> str:
    kw = conn.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    return f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"


def drive(exp_id: str) -> str:
    """RQ job: drive one experiment until it is finished, handed back, or owned by someone else."""
    if os.environ.get(PARENT_ENV):  # forked by a slot: die with it, the run lives on in tmux
        die_with_parent(expected_parent_from_env())
    job = get_current_job()
    settings = get_settings()
    # Our own connection, with timeouts: a node cut off from Redis must keep watching, not hang.
    url = settings.redis_url or _connection_url(job.connection)  # type: ignore[union-attr]
    conn = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=3, health_check_interval=5)
    store = Store(conn)
    node = NodeInfo.from_settings(settings.node, settings.gpus, settings.slots)
    owner = f"{node.name}/{os.getpid()}/{uuid.uuid4().hex[:6]}"
    reporter = watch_reporter(store, node.name)
    try:
        driver = ExperimentDriver(store, exp_id, settings, node, owner, on_watch=reporter)
    except LookupError:
        reporter.close()
        return "deleted"
    try:
        outcome = driver.run()
    except (LostOwnership, TransitionConflict, RedisUnavailable) as exc:
        log.info("%s: not ours (%s)", exp_id, exc)
        return "not-owner"
    finally:
        reporter.close()
    if outcome:
        return outcome
    rec = store.record(exp_id)
    if rec is not None and rec.state == State.queued.value:  # no GPUs free here: back to the queue it came from
        origin = job.origin if job is not None else target_queue(None)
        enqueue_drive(conn, store, exp_id, origin, max_seconds=driver.bp.exp_max_time_seconds)
        return "requeued"
    return driver.lc.state
