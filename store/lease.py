"""A cluster-wide lease: one process at a time does a job meant to be done once per cluster.

The holder renews it at every pass; when it dies (or leaves) the key lapses after `seconds` and the
next process to ask takes it over. Redis' own expiry decides, so no clock of ours is trusted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import redis

from ajet_runner.store.keys import lease_key
from ajet_runner.store.scripts import lua

if TYPE_CHECKING:
    from ajet_runner.store.store import Store


class ClusterLease:
    def __init__(self, r: redis.Redis, name: str, holder: str, seconds: float) -> None:
        self.r = r
        self.key = lease_key(name)
        self.holder = holder
        self.seconds = seconds
        self._take = r.register_script(lua("cluster_lease"))
        self._give_back = r.register_script(lua("del_if_value"))

    @classmethod
    def on(cls, store: Store, name: str, holder: str, seconds: float) -> ClusterLease:
        """The lease on `store`'s Redis (callers above the store never hold its raw client)."""
        return cls(store.r, name, holder, seconds)

    def hold(self) -> bool:
        """Take the lease, or renew it if it is ours: True while we hold it (one round trip)."""
        return bool(self._take(keys=[self.key], args=[self.holder, max(1, int(self.seconds * 1000))]))

    def release(self) -> bool:
        """Give it back now (only if ours), so another process takes over at its next pass."""
        return bool(self._give_back(keys=[self.key], args=[self.holder]))

    def current(self) -> str | None:
        """Who holds it now, if anyone."""
        raw = self.r.get(self.key)
        return raw.decode() if isinstance(raw, bytes) else raw
