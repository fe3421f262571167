"""The queued records worth a look by the cluster's queue checker, picked by one Lua script in Redis.

Reading every queued record and its RQ job from Python cost ~0.7 kB and a round trip per record on
every node every scan (2.1 MB per scan at 3,000 queued); the script returns only the few records for
which no drive job waits or whose target node is gone, so healthy queued work costs no bytes (and, its
job's id naming it, no read of its record).
"""

from __future__ import annotations

from collections.abc import Iterable

from rq.intermediate_queue import IntermediateQueue
from rq.queue import Queue

from ajet_runner.statemachine.lifecycle import State
from ajet_runner.store.keys import exp_key, state_index_key
from ajet_runner.store.naming import node_queue
from ajet_runner.store.queue import drive_job_id
from ajet_runner.store.scripts import lua
from ajet_runner.store.store import Store

JOB_PREFIX = drive_job_id("x").split("x")[0]  # "drive-": a drive job's id is drive-<experiment id>-<6 hex>
SUSPECT_FIELDS = ("state", "job_id", "owner", "queue", "max_seconds", "target_node", "created_at")


class QueueSuspects:
    """`suspects(alive_nodes)`: the queued records for which no drive job waits in any RQ queue (no owner
    yet: "job_lost" = "1"), or that wait for a node not in `alive_nodes`, unreported (`reported_field` unset)."""

    def __init__(self, store: Store, reported_field: str) -> None:
        self.store = store
        self.reported_field = reported_field
        self._script = store.r.register_script(lua("queue_suspects"))

    def __call__(self, alive_nodes: Iterable[str]) -> list[dict[str, str]]:
        flat = self._script(keys=[state_index_key(State.queued.value), Queue.redis_queues_keys],
                            args=[exp_key(""), Queue.redis_queue_namespace_prefix,
                                  IntermediateQueue.get_intermediate_queue_key(""), self.reported_field,
                                  JOB_PREFIX, len(drive_job_id("x")) - len(JOB_PREFIX) - 1, node_queue(""),
                                  *alive_nodes])
        names = ("job_lost", *SUSPECT_FIELDS, self.reported_field)
        width = len(names) + 1
        out = []
        for k in range(0, len(flat), width):
            values = [v.decode() if isinstance(v, bytes) else "" if v is None else str(v)
                      for v in flat[k:k + width]]
            rec = dict(zip(names, values[1:], strict=True))
            rec["id"] = values[0]
            out.append(rec)
        return out
