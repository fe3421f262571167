"""The consumer side of the queue: the job function a worker runs (enqueueing is in store/per_experiment/queue.py).

RQ only carries the experiment id (JSON serializer, never pickle) and gives us a process to run
in; our own state in Redis decides what happens, so jobs have no RQ retries and a timeout
above the experiment's max time.
"""

from __future__ import annotations

import logging

from rq import get_current_job
from rq.job import Job

from ajet_runner.statemachine.lifecycle import State
from ajet_runner.store.connection import RedisTarget, connect, connection_target, target_from
from ajet_runner.store.per_experiment.queue import DEFAULT_QUEUE, job_timeout, node_queue, queue, target_queue
from ajet_runner.store.settings import Settings, get_settings
from ajet_runner.store.store import RedisError, Store, TransitionConflict
from ajet_runner.workers.drive.driver import ExperimentDriver
from ajet_runner.workers.drive.journal import HandedBack, LostOwnership, RedisUnavailable
from ajet_runner.workers.identity.owner_identity import owner_id
from ajet_runner.workers.identity.this_node import NodeInfo
from ajet_runner.workers.node.hosting import HOST

log = logging.getLogger(__name__)
__all__ = ["DEFAULT_QUEUE", "drive", "drive_rank", "job_timeout", "node_queue", "queue",
           "target_queue"]


def drive_rank(exp_id: str, rank: int) -> str:
    """RQ job: run and watch rank `rank` of a multi-node experiment on this node (ajet_runner.workers.gang.rank)."""
    from ajet_runner.store.cluster.gangs import GangStore
    from ajet_runner.workers.gang.rank import RankDriver

    job = get_current_job()
    settings = get_settings()
    url = _redis_target(settings, job)
    conn = connect(url, socket_timeout=5, socket_connect_timeout=3, health_check_interval=5)
    node = NodeInfo.from_settings(settings.node, settings.gpus, settings.slots)
    owner = owner_id(node.name)
    return RankDriver(Store(conn), GangStore(conn), exp_id, int(rank), settings, node, owner,
                      handback=HOST.handback()).run()


def _redis_target(settings: Settings, job: Job | None) -> RedisTarget:
    """The configured Redis (a URL or the sentinels), else the one the current RQ job came from."""
    configured = target_from(settings)
    if configured is not None:
        return configured
    if job is None:
        raise RuntimeError("no Redis is configured and this is not an RQ job: no Redis to use")
    return connection_target(job.connection)


def drive(exp_id: str) -> str:
    """RQ job: drive one experiment until it is finished, handed back, or owned by someone else."""
    job = get_current_job()
    settings = get_settings()
    # Our own connection, with timeouts: a node cut off from Redis must keep watching, not hang.
    url = _redis_target(settings, job)
    conn = connect(url, socket_timeout=5, socket_connect_timeout=3, health_check_interval=5)
    store = Store(conn)
    node = NodeInfo.from_settings(settings.node, settings.gpus, settings.slots)
    owner = owner_id(node.name)
    reporter = HOST.reporter(store, node.name)
    try:
        try:
            driver = ExperimentDriver(store, exp_id, settings, node, owner, on_watch=reporter,
                                      handback=HOST.handback())
        except LookupError:
            return "deleted"
        try:
            outcome = driver.run()
        except HandedBack:
            _hand_back(store, exp_id, owner)
            return "handed-back"
        except (LostOwnership, TransitionConflict, RedisUnavailable) as exc:
            log.info("%s: not ours (%s)", exp_id, exc)
            return "not-owner"
        except Exception:
            # A driver's own failure: its process lives on (other runs' threads), so say so, or the
            # supervisor would see a live driver and never re-adopt the run. RQ records the traceback.
            _hand_back(store, exp_id, owner)
            raise
        if outcome:
            return outcome
        rec = store.records.get(exp_id)
        if rec is not None and rec.state == State.queued.value:  # no GPUs free here: back to the queue it came from
            origin = job.origin if job is not None else target_queue(None)
            store.jobs.enqueue_drive(exp_id, origin, max_seconds=driver.bp.exp_max_time_seconds)
            return "requeued"
        return driver.lc.state
    finally:
        reporter.close()


def _hand_back(store: Store, exp_id: str, owner: str) -> None:
    """End our lease now (CAS on the owner); if Redis is unreachable it simply runs out."""
    try:
        if store.runs.hand_back(exp_id, owner):
            log.info("%s: handed back (lease ended) for the node's supervisor to re-adopt", exp_id)
    except RedisError as exc:
        log.warning("%s: could not hand back (%s): its lease will run out", exp_id, exc)
