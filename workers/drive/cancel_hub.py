"""One stop-request subscription per process and Redis: every journal in this watcher hears its run's stop
announcement (store/keys.py cancel_channel) through one pub/sub connection and one thread.

A listener per run held a Redis connection and a thread per run (3,000 connections on one Redis at 100 nodes
of 30 runs) and woke every few seconds each. Here one thread waits on one connection; journals register and
unregister their run; a registration wakes the thread at once through a channel of its own (a PUBLISH), so
the subscription is live within a round trip. While it is not (Redis away, not yet confirmed), `subscribed`
says so and the journal polls the flag instead, as before.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ajet_runner.store.keys import PREFIX, cancel_channel
from ajet_runner.store.store import REDIS_DOWN, Store
from ajet_runner.workers.drive.per_server import PerServer

if TYPE_CHECKING:
    from ajet_runner.store.store import PubSub

log = logging.getLogger(__name__)
WAKE_SECONDS = 30.0  # the thread's longest wait with nothing announced (registrations wake it at once)
RETRY_SECONDS = 1.0


class CancelHub:
    def __init__(self, store: Store) -> None:
        # A client of its own: the driver that made the first registration may close its client while others run.
        self._store = store.twin(socket_timeout=5, socket_connect_timeout=3, health_check_interval=5)
        self._connected = False  # the hub's subscription connection is up (else a poke would only wait)
        self._wake = f"{PREFIX}:cancel-hub:{uuid.uuid4().hex}"
        self._lock = threading.Lock()
        self._wanted: dict[str, dict[int, Callable[[], None]]] = {}  # channel -> registration -> callback
        self._numbers = itertools.count(1)
        self._live: set[str] = set()  # channels whose subscription Redis confirmed on the current connection
        self._thread = threading.Thread(target=self._run, name="cancel-hub", daemon=True)
        self._thread.start()

    def register(self, exp_id: str, on_cancel: Callable[[], None]) -> int:
        """Call `on_cancel` (on the hub's thread) when a stop of `exp_id` is announced; returns the
        registration for `unregister` (two drivers of one run in a process, an old one closing while a new
        one starts, each keep their own)."""
        number = next(self._numbers)
        with self._lock:
            self._wanted.setdefault(cancel_channel(exp_id), {})[number] = on_cancel
        self._poke()
        return number

    def unregister(self, exp_id: str, number: int) -> None:
        channel = cancel_channel(exp_id)
        with self._lock:
            mine = self._wanted.get(channel, {})
            mine.pop(number, None)
            if not mine:
                self._wanted.pop(channel, None)
        self._poke()

    def subscribed(self, exp_id: str) -> bool:
        """A stop request for `exp_id` published now reaches its callback."""
        return cancel_channel(exp_id) in self._live

    def _poke(self) -> None:
        if not self._connected:
            return  # the thread subscribes everything wanted when it (re)connects
        with contextlib.suppress(*REDIS_DOWN):
            self._store.poke(self._wake)

    def _run(self) -> None:
        while True:
            pubsub = self._store.pubsub(confirmations=True)
            try:
                pubsub.subscribe(self._wake)
                self._connected = True
                while True:
                    self._sync(pubsub)
                    message = pubsub.get_message(timeout=WAKE_SECONDS)
                    if message is not None:
                        self._deliver(message)
            except (*REDIS_DOWN, OSError, ValueError) as exc:
                log.debug("cancel hub: %s; resubscribing", exc)
                time.sleep(RETRY_SECONDS)
            finally:
                self._connected = False
                self._live = set()
                pubsub.close()

    def _sync(self, pubsub: PubSub) -> None:
        """Subscribe what is wanted and not yet asked for on this connection, drop what is no longer wanted."""
        with self._lock:
            wanted = set(self._wanted)
        names = set(pubsub.channels) - set(pubsub.pending_unsubscribe_channels)
        asked = {c.decode() if isinstance(c, bytes) else str(c) for c in names} - {self._wake}
        if new := sorted(wanted - asked):
            pubsub.subscribe(*new)
        if gone := sorted(asked - wanted):
            pubsub.unsubscribe(*gone)
            self._live -= set(gone)

    def _deliver(self, message: dict[str, Any]) -> None:
        channel = message.get("channel")
        name = channel.decode() if isinstance(channel, bytes) else str(channel)
        kind = message.get("type")
        if kind == "subscribe":
            self._live.add(name)
        elif kind == "unsubscribe":
            self._live.discard(name)
        elif kind == "message":
            with self._lock:
                callbacks = list(self._wanted.get(name, {}).values())
            for callback in callbacks:
                try:
                    callback()
                except Exception:  # one journal's failure must not deafen every other run of this process
                    log.exception("cancel hub: the callback for %s failed", name)


hub_for = PerServer(CancelHub)  # the process's hub for the Redis server a store reads
