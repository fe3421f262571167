"""Redis clients for the processes that open their own: the API, the node's supervisor, watcher and RQ slot
workers, the RQ job entry points, the CLI. They are all made by store/clients.py (a URL, or the master that
Redis Sentinel names, with retries through a failover); this module adds the Store on one and keeps `redis`
out of the layers above the store."""

from __future__ import annotations

from typing import Any

import redis

from ajet_runner.store.clients import (
    MASTER_ENV,
    PASSWORD_ENV,
    SENTINELS_ENV,
    URL_ENV,
    NoMasterKnown,
    RedisSettingsError,
    RedisTarget,
    async_client,
    check_reachable,
    clone,
    connect,
    connection_target,
    connection_url,
    is_replicated,
    master_address,
    need_target,
    redact_url,
    server_identity,
    target_from,
)
from ajet_runner.store.store import Store

Connection = redis.Redis

__all__ = ["MASTER_ENV", "PASSWORD_ENV", "SENTINELS_ENV", "URL_ENV", "Connection", "NoMasterKnown",
           "RedisSettingsError", "RedisTarget", "async_client", "check_reachable", "clone", "connect",
           "connection_target", "connection_url", "is_replicated", "master_address", "need_target", "redact_url",
           "server_identity", "store_at", "target_from"]


def store_at(where: RedisTarget | str, **options: Any) -> Store:
    """A Store on a client of its own (a URL, or a target: store/clients.py)."""
    return Store(connect(where, **options))
