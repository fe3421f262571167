"""The driver's writes to Redis, buffered while Redis is unreachable.

A node cut off from Redis keeps watching its experiment; transitions, events and field updates
queue here in order and are replayed when Redis answers again. Versions are tracked locally so
the replayed transitions still compare-and-set against what this owner last wrote.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import redis

from service.store import Store, TransitionConflict

log = logging.getLogger(__name__)
MAX_BUFFERED = 100_000


class Journal:
    def __init__(self, store: Store, exp_id: str, owner: str, version: int) -> None:
        self.store = store
        self.exp_id = exp_id
        self.owner = owner
        self.version = version
        self._pending: deque[Callable[[], Any]] = deque()
        self.buffered_total = 0

    @property
    def pending(self) -> int:
        return len(self._pending)

    def flush(self) -> bool:
        """Replay what is pending; True when nothing is left. A conflict propagates."""
        while self._pending:
            try:
                self._pending[0]()
            except (redis.ConnectionError, redis.TimeoutError):
                return False
            self._pending.popleft()
        return True

    def _do(self, op: Callable[[], Any]) -> None:
        if self._pending and not self.flush():
            self._buffer(op)
            return
        try:
            op()
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            log.warning("redis unreachable (%s): buffering %s's writes", exc, self.exp_id)
            self._buffer(op)

    def _buffer(self, op: Callable[[], Any]) -> None:
        if len(self._pending) >= MAX_BUFFERED:
            self._pending.popleft()  # keep the newest: state transitions are re-derivable from the last
        self._pending.append(op)
        self.buffered_total += 1

    def transition(self, fields: Mapping[str, Any], event: Mapping[str, Any],
                   stats: Mapping[str, Any] | None = None) -> None:
        expected = self.version
        self.version += 1
        fields, event, stats = dict(fields), dict(event), dict(stats or {})

        def op() -> None:
            self.store.transition(self.exp_id, expected_version=expected, owner=self.owner,
                                  fields=fields, event=event, stats=stats)

        self._do(op)

    def publish(self, event: Mapping[str, Any]) -> None:
        event = dict(event)
        self._do(lambda: self.store.publish(self.exp_id, event))

    def update(self, fields: Mapping[str, Any]) -> None:
        fields = dict(fields)
        self._do(lambda: self.store.update(self.exp_id, fields))

    def renew(self, seconds: float) -> bool:
        """Renew our lease; False only when Redis says someone else owns the experiment now."""
        if self._pending and not self.flush():
            return True
        try:
            return self.store.renew_lease(self.exp_id, self.owner, seconds)
        except (redis.ConnectionError, redis.TimeoutError):
            return True

    def cancel_requested(self) -> bool:
        try:
            return self.store.cancel_requested(self.exp_id)
        except (redis.ConnectionError, redis.TimeoutError):
            return False


__all__ = ["Journal", "TransitionConflict"]
