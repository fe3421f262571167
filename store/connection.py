"""Redis clients made from a URL, for the processes that open their own: the API, the node's watcher and its
RQ slot workers, the RQ job entry points. The timeouts are each caller's (a blocking pop must not be cut
off, an API call must not hang); this module only keeps `redis` out of the layers above the store."""

from __future__ import annotations

from typing import Any

import redis

from ajet_runner.store.store import Store

Connection = redis.Redis


def connect(url: str, **options: Any) -> redis.Redis:
    """A raw client (for RQ, which takes a connection): `redis.Redis.from_url(url, **options)`."""
    return redis.Redis.from_url(url, **options)


def store_at(url: str, **options: Any) -> Store:
    """A Store on a client of its own: `Store(redis.Redis.from_url(url, **options))`."""
    return Store(redis.Redis.from_url(url, **options))


def connection_url(conn: redis.Redis) -> str:
    """The URL a client was made from (an RQ job's connection, to build a client of our own)."""
    kw = conn.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}?db={kw.get('db', 0)}"
    return f"redis://{kw.get('host', 'localhost')}:{kw.get('port', 6379)}/{kw.get('db', 0)}"
