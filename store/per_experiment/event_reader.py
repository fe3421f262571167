"""The API's async Redis reads for SSE: XREAD BLOCK on an event stream, and the few record reads the
followers need between blocks. A client of its own (redis.asyncio, a socket timeout longer than any block,
or a long block would be cut off as a timeout), so handlers above the store never hold a raw client."""

from __future__ import annotations

from typing import Any

from ajet_runner.store.clients import RedisTarget, async_client

# Longer than any block the API asks for (a long poll's wait_ms <= 30 s, the SSE keepalive 15 s), so a block is
# never cut off; but bounded: a master that hangs instead of dying must not hold a follower for ever (after
# the timeout the client retries on the master the sentinels name now).
READ_TIMEOUT_SECONDS = 45.0


class EventReader:
    """Made from a URL or target on first use by the API's Backend; each method is the Redis command of its name."""

    def __init__(self, where: RedisTarget | str, read_timeout: float = READ_TIMEOUT_SECONDS) -> None:
        self._r = async_client(where, socket_timeout=read_timeout, socket_connect_timeout=5, health_check_interval=10)

    async def xread(self, streams: dict[Any, Any], count: int | None = None, block: int | None = None) -> Any:
        return await self._r.xread(streams, count=count, block=block)

    async def xrevrange(self, key: str, count: int | None = None) -> Any:
        return await self._r.xrevrange(key, count=count)

    async def hget(self, key: str, field: str) -> Any:
        return await self._r.hget(key, field)

    async def exists(self, key: str) -> int:
        return int(await self._r.exists(key))

    async def aclose(self) -> None:
        await self._r.aclose()
