"""The Redis side of a worker's own /metrics (workers/node/worker_metrics.py holds the keys' meaning): the
watcher's flushes, on a client of their own whose calls give up quickly, and the supervisor's reads at
scrape time."""

from __future__ import annotations

from typing import Any

import redis

from ajet_runner.store.clients import clone
from ajet_runner.store.keys import node_key, watch_exp_key, watch_exps_key, watch_metrics_key
from ajet_runner.store.scripts import lua
from ajet_runner.store.store import Store


def short_timeout_client(client: redis.Redis, seconds: float) -> redis.Redis:
    """A client like `client` whose calls give up quickly: the job's own one may block forever."""
    return clone(client, socket_timeout=seconds, socket_connect_timeout=seconds)


class WatchFlusher:
    """`flush_watch` on a short-timeout copy of `store`'s client, made at the first flush."""

    def __init__(self, store: Store, timeout: float) -> None:
        self._source = store.r
        self._timeout = timeout
        self._client: redis.Redis | None = None
        self._script: Any = None

    def __call__(self, keys: list[str], args: list[object]) -> None:
        if self._client is None:
            self._client = short_timeout_client(self._source, self._timeout)
            self._script = self._client.register_script(lua("flush_watch"))
        self._script(keys=keys, args=args)


def read_watch(store: Store, node: str, expired_before: float) -> tuple[dict[Any, Any], list[str], Any, list[Any]]:
    """`node`'s watch hash, its experiments (those flushed before `expired_before` dropped first), its
    last heartbeat, and each experiment's (log_bytes, age, at): two pipelines."""
    pipe = store.r.pipeline(transaction=False)
    pipe.hgetall(watch_metrics_key(node))
    pipe.zremrangebyscore(watch_exps_key(node), "-inf", expired_before)
    pipe.zrange(watch_exps_key(node), 0, -1)
    pipe.hget(node_key(node), "last_seen")
    raw_watch, _, raw_exps, last_seen = pipe.execute()
    exps = sorted(e.decode() for e in raw_exps)
    pipe = store.r.pipeline(transaction=False)
    for exp_id in exps:
        pipe.hmget(watch_exp_key(node, exp_id), "log_bytes", "age", "at")
    per_exp = pipe.execute() if exps else []
    return raw_watch, exps, last_seen, per_exp
