"""What the API's handlers share: settings, the Redis store (sync) and an async Redis for blocking reads."""

from __future__ import annotations

import threading

from fastapi import HTTPException, Request, status

from ajet_runner.store.connection import RedisSettingsError, RedisTarget, store_at, target_from
from ajet_runner.store.per_experiment.event_reader import EventReader
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store


class Backend:
    """Redis clients are made on first use, so /healthz and the OpenAPI document need no Redis."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._store: Store | None = None
        self._aio: EventReader | None = None
        self._lock = threading.Lock()

    def _target(self) -> RedisTarget:
        """REDIS_URL, or the sentinels and master name (checked by `serve` at start)."""
        try:
            target = target_from(self.settings)
        except RedisSettingsError as exc:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(exc)) from exc
        if target is None:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, "no Redis is configured on this server "
                                "(REDIS_URL, or AJET_RUNNER_REDIS_SENTINELS and AJET_RUNNER_REDIS_MASTER)")
        return target

    @property
    def store(self) -> Store:
        with self._lock:
            if self._store is None:
                store = store_at(self._target(), socket_timeout=15, socket_connect_timeout=5, health_check_interval=10)
                store.indexes.backfill()  # records from before the per-state/per-node indexes: once per cluster
                self._store = store
            return self._store

    @property
    def aio(self) -> EventReader:
        """For XREAD BLOCK: a socket timeout longer than any block (store/per_experiment/event_reader.py)."""
        if self._aio is None:
            self._aio = EventReader(self._target())
        return self._aio

    @property
    def allowed_roots(self) -> list[str]:
        return [r for r in self.settings.allowed_roots.split(":") if r.strip()]

    async def close(self) -> None:
        if self._aio is not None:
            await self._aio.aclose()
        if self._store is not None:
            self._store.close()


async def backend(request: Request) -> Backend:
    """The dependency (async: a sync one would cost a threadpool hop on every request)."""
    return request.app.state.backend
