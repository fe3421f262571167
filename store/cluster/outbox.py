"""The outbox: notices that must reach someone (a webhook, a stage report) even if a worker dies.

A task is written atomically with the fact it reports (store/finish_notify.lua runs in the MULTI of an
experiment's finishing transition; store/stage_complete.lua queues a stage's task when its last experiment
is handled), then a node's deliverer (workers/notify/) takes it for a lease (store/outbox_claim.lua),
handles it and removes it — or puts it back with a later due time. A deliverer that dies mid-task leaves
it to be taken again when the lease runs out: every task is handled at least once, and a receiver
deduplicates by its `delivery` id.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import redis
from redis.client import Pipeline

from ajet_runner.store.keys import OUTBOX, OUTBOX_DEAD, OUTBOX_TASKS, exp_key, stage_key, stage_meta_key
from ajet_runner.store.records import text
from ajet_runner.store.scripts import lua

__all__ = ["DEAD_KEPT", "EXPERIMENT_FINISHED", "STAGE_FINISHED", "Outbox", "queue_finish"]

EXPERIMENT_FINISHED = "experiment_finished"
STAGE_FINISHED = "stage_finished"
DEAD_KEPT = 1000  # tasks given up on, kept for a look (newest first)


def _task(kind: str, **fields: Any) -> tuple[str, str]:
    task_id = uuid.uuid4().hex
    return task_id, json.dumps({"kind": kind, "delivery": task_id, "created_at": time.time(), "attempts": 0,
                                **fields}, default=str)


def queue_finish(pipe: Pipeline, exp_id: str) -> None:
    """Add to a MULTI, after the finishing transition: the experiment's `experiment_finished` task, queued
    only if the record is finished now and had none (store/finish_notify.lua)."""
    task_id, body = _task(EXPERIMENT_FINISHED, id=exp_id)
    pipe.eval(lua("finish_notify"), 3, exp_key(exp_id), OUTBOX, OUTBOX_TASKS, task_id, time.time(), body)


class Outbox:
    """The deliverer's side: take a due task, then mark it done, due again later, or given up."""

    def __init__(self, client: redis.Redis) -> None:
        self.r = client
        self._claim = client.register_script(lua("outbox_claim"))
        self._stage_complete = client.register_script(lua("stage_complete"))

    def claim(self, lease_seconds: float, now: float | None = None) -> tuple[str, dict[str, Any]] | None:
        """(task id, task) of the next due task, now held for `lease_seconds`; None when nothing is due."""
        got = self._claim(keys=[OUTBOX, OUTBOX_TASKS], args=[now or time.time(), max(1.0, lease_seconds)])
        if not got:
            return None
        task_id, body = text(got[0]), text(got[1])
        try:
            task = json.loads(body)
        except ValueError:
            task = {"kind": "unreadable", "body": body[:500]}
        return task_id, task if isinstance(task, dict) else {"kind": "unreadable"}

    def done(self, task_id: str) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.zrem(OUTBOX, task_id)
        pipe.hdel(OUTBOX_TASKS, task_id)
        pipe.execute()

    def later(self, task_id: str, task: dict[str, Any], delay_seconds: float) -> None:
        """Due again in `delay_seconds`, with what the task learnt (attempts, last error, steps done)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(OUTBOX_TASKS, task_id, json.dumps(task, default=str))
        pipe.zadd(OUTBOX, {task_id: time.time() + max(0.0, delay_seconds)})
        pipe.execute()

    def give_up(self, task_id: str, task: dict[str, Any], why: str) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.zrem(OUTBOX, task_id)
        pipe.hdel(OUTBOX_TASKS, task_id)
        pipe.lpush(OUTBOX_DEAD, json.dumps({**task, "given_up": why, "given_up_at": time.time()}, default=str))
        pipe.ltrim(OUTBOX_DEAD, 0, DEAD_KEPT - 1)
        pipe.execute()

    def check_stage(self, stage: str) -> bool:
        """Queue the stage's `stage_finished` task if every experiment of it is finished and this membership
        was not reported yet (store/stage_complete.lua); True when queued now."""
        task_id, body = _task(STAGE_FINISHED, stage=stage)
        queued, _ = self._stage_complete(keys=[stage_key(stage), stage_meta_key(stage), OUTBOX, OUTBOX_TASKS],
                                         args=[exp_key(""), task_id, time.time(), body])
        return bool(queued)

    def pending(self) -> int:
        return int(self.r.zcard(OUTBOX))

    def dead(self, count: int = 100) -> list[dict[str, Any]]:
        """The newest `count` dead letters (tasks given up on); an unreadable one as {"kind": "unreadable"}."""
        out = []
        for raw in self.r.lrange(OUTBOX_DEAD, 0, max(0, count - 1)):
            try:
                item = json.loads(raw)
            except ValueError:
                item = None
            out.append(item if isinstance(item, dict) else {"kind": "unreadable"})
        return out

    def dead_count(self) -> int:
        return int(self.r.llen(OUTBOX_DEAD))
