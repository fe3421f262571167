"""Redis is the system of record: one hash per experiment, event streams, nodes, GPU slots.

`Store` is one Redis client and the parts that each own their keys, like rq's per-registry classes: `records` (the
experiment hashes and their compare-and-set transitions, store/per_experiment/record_store.py), `indexes` (the lists
and scans, store/per_experiment/filters.py), `events` and `log_tail` (store/per_experiment/event_log.py), `runs` (the
owner's lease and stop requests, store/per_experiment/run_control.py), `result_dirs`
(store/per_experiment/result_dirs.py), `nodes` and `slots` (store/cluster/nodes.py), `jobs` (the RQ producer,
store/per_experiment/queue.py) and `counters` (store/cluster/stats.py). Callers say `store.records.get(id)`,
`store.events.publish(id, event)`, `store.nodes.heartbeat(...)`. What is left here belongs to the connection itself,
and to the /metrics snapshot that reads across every part.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import redis
from redis.client import PubSub

from ajet_runner.store.clients import is_replicated, master_address
from ajet_runner.store.cluster.gangs import GangStore
from ajet_runner.store.cluster.nodes import Nodes, Slots
from ajet_runner.store.cluster.outbox import Outbox
from ajet_runner.store.cluster.snapshot import RowCache, Snapshot, read_snapshot, read_stages
from ajet_runner.store.cluster.stats import Counters
from ajet_runner.store.keys import (
    GLOBAL_STREAM,
    INDEX,
    NODES,
    PREFIX,
    UNFINISHED,
    drain_key,
    exp_key,
    gpu_key,
    node_key,
    stream_key,
    swarm_port_key,
)
from ajet_runner.store.per_experiment.event_log import EventLog, LogTail
from ajet_runner.store.per_experiment.filters import Indexes
from ajet_runner.store.per_experiment.queue import Jobs
from ajet_runner.store.per_experiment.record_store import (
    DURATION_BUCKETS,
    Records,
    ResultDirTaken,
    TransitionConflict,
    decode,
)
from ajet_runner.store.per_experiment.result_dirs import ResultDirs
from ajet_runner.store.per_experiment.run_control import RunControl

if TYPE_CHECKING:
    from ajet_runner.store.clients import RedisTarget

__all__ = ["DURATION_BUCKETS", "GLOBAL_STREAM", "INDEX", "NODES", "PREFIX", "REDIS_DOWN", "UNFINISHED", "RedisError",
           "ResultDirTaken", "Store", "TransitionConflict",
           "decode",
           "drain_key", "exp_key", "gpu_key", "new_id", "node_key", "stream_key", "swarm_port_key"]

# What callers above the store catch, without importing redis themselves: any Redis failure, and the ones
# that mean it is unreachable (retry later) rather than a bug.
RedisError = redis.RedisError
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)

NODE_ALIVE_SECONDS = 30.0  # a node whose last heartbeat is older is down (node_up 0, not offered work)


def new_id() -> str:
    """12 random hex digits: unique enough, short to type, and its head names the tmux session."""
    return uuid.uuid4().hex[:12]


class Store:
    """One Redis client, and the parts of the system of record on it (each owning its keys)."""

    retention_seconds: int = 0  # a finished record expires after this (0: never); set from the settings

    def __init__(self, client: redis.Redis, retention_seconds: float | None = None) -> None:
        self.r = client
        self.replicated = is_replicated(client)  # a Sentinel-managed master: transitions wait for a replica
        if retention_seconds is None:
            from ajet_runner.store.settings import get_settings

            retention_seconds = get_settings().finished_retention_days * 86400
        self.retention_seconds = int(retention_seconds)  # a finished record expires after this (0: never)
        self.records = Records(client, self.retention_seconds, self.replicated)
        self.indexes = Indexes(client, self.retention_seconds)  # the filtered lists, the expiry sweep, the backfill
        self.events = EventLog(client, self.replicated)
        self.log_tail = LogTail(client)
        self.runs = RunControl(client)
        self.result_dirs = ResultDirs(client)
        self.nodes = Nodes(client)
        self.slots = Slots(client)
        self.jobs = Jobs(client, self.records)
        self.counters = Counters(client)

    @classmethod
    def from_url(cls, url: RedisTarget | str, retention_seconds: float | None = None, **options: Any) -> Store:
        """A store on its own client for a URL or a target (store/clients.py); `options` are redis-py's
        (socket_timeout, health_check_interval, ...)."""
        from ajet_runner.store.clients import connect

        options.setdefault("health_check_interval", 10)
        return cls(connect(url, **options), retention_seconds)

    def outbox(self) -> Outbox:
        """The outbox of notices to deliver (store/cluster/outbox.py), on this store's client."""
        return Outbox(self.r)

    def gangs(self) -> GangStore:
        """The multi-node gangs (store/cluster/gangs.py), on this store's client."""
        return GangStore(self.r)

    def pubsub(self, *, confirmations: bool = False) -> PubSub:
        """A pub/sub connection (e.g. to hear a cancel announced on `cancel_channel`): the caller closes it.
        `confirmations`: get_message also returns Redis's (un)subscribe confirmations."""
        return self.r.pubsub(ignore_subscribe_messages=not confirmations)

    def poke(self, channel: str) -> None:
        """Publish on a channel of the caller's own (to wake its listener)."""
        self.r.publish(channel, "1")

    @property
    def server(self) -> tuple[Any, ...]:
        """Which server and account this store's client talks to (equal for two clients of one Redis)."""
        from ajet_runner.store.clients import server_identity

        return server_identity(self.r)

    def twin(self, **options: Any) -> Store:
        """A Store on a client of its own (own pool) with this one's connection settings, auth and TLS
        included; `options` override some (timeouts)."""
        from ajet_runner.store.clients import clone

        return Store(clone(self.r, **options))

    def master_address(self) -> tuple[str, int] | None:
        """Under Sentinel, the master this store's client last connected to (a change: a failover); else None."""
        return master_address(self.r)

    def ping(self) -> bool:
        return bool(self.r.ping())

    def close(self) -> None:
        """Close the client's connections (a short-lived process: its pool goes with it)."""
        self.r.close()

    def pipeline(self) -> Any:
        """A plain (not transactional) pipeline of this server, for the calls that take `client=`."""
        return self.r.pipeline(transaction=False)

    def server_time(self) -> float:
        sec, usec = self.r.time()
        return float(sec) + usec / 1e6

    # -- /metrics: the reads that span every part ---------------------------------------------
    @property
    def redis_id(self) -> int:
        """Which Redis client this store reads (two stores over one client share a /metrics answer)."""
        return id(self.r)

    def snapshot(self, finished_ttl: float, now: float, cache: RowCache | None = None) -> Snapshot:
        """Everything one /metrics scrape reads (store/cluster/snapshot.py), in three pipelined round trips."""
        return read_snapshot(self, finished_ttl, now, cache)

    def stage_snapshot(self, limit: int, fields: tuple[str, ...]) -> list[tuple[str, list[list[Any]]]]:
        """The newest `limit` stages with `fields` of each member (raw replies: None when absent)."""
        return read_stages(self, limit, fields)
