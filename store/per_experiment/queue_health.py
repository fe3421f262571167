"""The queued records worth a look by the cluster's queue checker (workers/node/queue_check.py).

Reading every queued record and its RQ job cost ~0.7 kB and a round trip per record on every node
every scan (2.1 MB per scan at 3,000 queued). Here the waiting drive jobs are read from the RQ queues
themselves — a drive job's id names its experiment (drive-<id>-<6 hex>) — and set against the queued
index: only records with no waiting job, or waiting for a node that is gone, are read (a few fields).
The set difference is done here, not in a Lua script: the lists cost Redis ~0.2 µs an item to send,
where building Lua strings of them cost ~4 µs an item (37 ms, blocking, at 10,000 queued).
"""

from __future__ import annotations

from collections.abc import Iterable

from rq.intermediate_queue import IntermediateQueue
from rq.queue import Queue

from ajet_runner.statemachine.lifecycle import State
from ajet_runner.store.keys import state_index_key
from ajet_runner.store.naming import node_queue
from ajet_runner.store.per_experiment.queue import drive_job_id
from ajet_runner.store.store import Store

JOB_PREFIX = drive_job_id("x").split("x")[0]  # "drive-"
JOB_SUFFIX = len(drive_job_id("x")) - len(JOB_PREFIX) - 1  # "-<6 hex>"
NODE_PREFIX = node_queue("")
SUSPECT_FIELDS = ("state", "job_id", "owner", "queue", "max_seconds", "target_node", "created_at")


def _text(raw: object) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def waiting_drive_jobs(store: Store, alive_nodes: set[str]) -> tuple[set[str], set[str]]:
    """(experiments with a drive job waiting in an RQ queue or its intermediate list, those of them waiting
    in the queue of a node not in `alive_nodes`)."""
    keys = sorted(_text(k) for k in store.r.smembers(Queue.redis_queues_keys))
    pipe = store.r.pipeline(transaction=False)
    for key in keys:
        pipe.lrange(key, 0, -1)
        pipe.lrange(IntermediateQueue.get_intermediate_queue_key(key), 0, -1)
    lists = pipe.execute()
    waiting: set[str] = set()
    far: set[str] = set()
    for k, key in enumerate(keys):
        name = key.removeprefix(Queue.redis_queue_namespace_prefix)
        gone = name.startswith(NODE_PREFIX) and name.removeprefix(NODE_PREFIX) not in alive_nodes
        ids = {job[len(JOB_PREFIX):-JOB_SUFFIX] for raw in (*lists[2 * k], *lists[2 * k + 1])
               if (job := _text(raw)).startswith(JOB_PREFIX)}
        waiting |= ids
        if gone:
            far |= ids
    return waiting, far


class QueueSuspects:
    """`suspects(alive_nodes)`: the queued records for which no drive job waits in any RQ queue (no owner yet:
    "job_lost" = "1"), or that wait for a node not in `alive_nodes`, unreported (`reported_field` unset)."""

    def __init__(self, store: Store, reported_field: str) -> None:
        self.store = store
        self.reported_field = reported_field

    def __call__(self, alive_nodes: Iterable[str]) -> list[dict[str, str]]:
        alive = set(alive_nodes)
        waiting, far = waiting_drive_jobs(self.store, alive)
        queued = [_text(i) for i in self.store.r.zrange(state_index_key(State.queued.value), 0, -1)]
        look = [i for i in queued if i in far or i not in waiting]
        out = []
        for rec in self.store.records.fields_of(look, (*SUSPECT_FIELDS, self.reported_field)):
            suspect = self._suspect(rec, waiting, alive)
            if suspect is not None:
                out.append(suspect)
        return out

    def _suspect(self, rec: dict[str, str], waiting: set[str], alive: set[str]) -> dict[str, str] | None:
        """The queued record with `job_lost` when its drive job is gone (it had one, no worker owns it, and
        none waits), or when its target node is absent (not alive, and the record was not reported yet)."""
        if rec["state"] != State.queued.value:
            return None
        lost = bool(rec["job_id"]) and not rec["owner"] and rec["id"] not in waiting
        absent = bool(rec["target_node"]) and not rec[self.reported_field] and rec["target_node"] not in alive
        if not (lost or absent):
            return None
        return {**rec, "job_lost": "1" if lost else "0"}
