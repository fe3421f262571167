"""One shared helper object per process and Redis server (the cancel hub, the journal pump), whatever
client each driver made for that server."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from ajet_runner.store.store import Store

T = TypeVar("T")


class PerServer(Generic[T]):
    def __init__(self, make: Callable[[Store], T]) -> None:
        self._make = make
        self._made: dict[tuple[object, ...], T] = {}
        self._lock = threading.Lock()

    def __call__(self, store: Store) -> T:
        """The one for the server `store` reads, made at the first call."""
        with self._lock:
            made = self._made.get(store.server)
            if made is None:
                made = self._made[store.server] = self._make(store)
            return made
