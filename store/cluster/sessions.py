"""Logged-out console sessions, by nonce, in Redis: every replica sees a logout at once.

Each revocation keeps a TTL until its cookie would have expired anyway, so the keys clean themselves up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ajet_runner.store.keys import ui_session_revoked_key
from ajet_runner.store.store import Store


@dataclass
class Revocations:
    """Logged-out sessions, by nonce (`store` is a factory: the app's Store is built after the UI)."""

    store: Callable[[], Store]

    def revoke(self, nonce: str, expires: int, now: float | None = None) -> None:
        left = max(1, int(expires - (now or time.time())) + 1)
        self.store().r.set(ui_session_revoked_key(nonce), "1", ex=left)

    def revoked(self, nonce: str) -> bool:
        return bool(self.store().r.exists(ui_session_revoked_key(nonce)))
