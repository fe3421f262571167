"""The embedded redis-server, as `ajet-runner run`/`up`, tests and bench know it: it lives in store/redis_server.py
(starting Redis is the store's business); this module keeps the old import path."""

from __future__ import annotations

from ajet_runner.store.redis_server import EmbeddedRedis, EmbeddedRedisError, find_redis_server, free_port

__all__ = ["EmbeddedRedis", "EmbeddedRedisError", "find_redis_server", "free_port"]
