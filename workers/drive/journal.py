"""The driver's writes to Redis, sent in the background and buffered while Redis is away.

A node cut off from Redis must keep watching its experiment at full speed: the watch loop only
queues transitions, events and field updates here and reads the cancel flag from a cached
value; the process's journal pump (workers/drive/journal_pump.py, one thread for every journal)
sends them in order, renews the lease and refreshes the cancel flag. When Redis answers again the
queue drains in order. Versions are counted locally, so replayed
transitions still compare-and-set against what this owner last wrote; a conflict (someone else
took the experiment over) is raised in the driver at its next call.

The claim of an experiment is the exception: `transition(..., ack=True)` waits until Redis
has accepted it, because launching on an unconfirmed claim could launch twice.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.store.cluster.stats import TransitionStats
from ajet_runner.store.events import checked
from ajet_runner.store.store import REDIS_DOWN, Store, TransitionConflict
from ajet_runner.workers.drive.cancel_hub import hub_for
from ajet_runner.workers.drive.journal_pump import pump_for

log = logging.getLogger(__name__)
MAX_BUFFERED = 100_000
POLL_SECONDS = 0.5  # the ownership/cancel look without a live cancel subscription ...
SUBSCRIBED_POLL_SECONDS = 5.0  # ... and with one (a stop request is pushed; the poll is the fallback)
REDIS_ERRORS = REDIS_DOWN


class LostOwnership(RuntimeError):
    """Another worker took the experiment over: stop driving it, touch nothing."""


class HandedBack(RuntimeError):
    """The process that hosts this driver is stopping: give the run back (it lives on in tmux)."""


class RedisUnavailable(RuntimeError):
    """A write that must be acknowledged could not reach Redis in time."""


Batched = Callable[[Any], object]  # adds an op's commands to the pump's pipeline (workers/drive/journal_pump.py)


class _Op(NamedTuple):
    seq: int
    send: Callable[[], Any]  # alone, in order
    droppable: bool
    batched: Batched | None = None  # or with others in one pipeline (a write whose answer nobody reads)


class Journal:
    def __init__(self, store: Store, exp_id: str, owner: str, version: int, retry_seconds: float = 1.0,
                 node: str = "") -> None:
        self.store = store
        self.node = node  # the node this driver runs on: the transition script keeps its indexes
        self.exp_id = exp_id
        self.owner = owner
        self.version = version
        self.lost = 0  # writes Redis acknowledged and lost in a failover (versions behind ours): see _restore
        self.retry_seconds = retry_seconds
        self.online = True
        self.buffered_total = 0
        self._ops: deque[_Op] = deque()
        self.dropped = 0
        self._seq = 0
        self._writer = uuid.uuid4().hex  # events carry (writer, n): a resend is never a second copy
        self._event_numbers = itertools.count(1)
        self._done = 0
        self._error: BaseException | None = None
        self._cancel = False
        self.on_cancel: Callable[[], None] | None = None  # called (hub or pump thread) when a stop request appears
        self._lease_seconds = 0.0
        self._renew_due = 0.0
        self._next_poll = 0.0  # monotonic: the first poll at once
        self._send_by = float("inf")  # monotonic: when what is queued must go (0: now; a lazy op: the next poll)
        self._cv = threading.Condition()
        self._hub = hub_for(store)  # the process's one stop-request subscription (cancel_hub.py)
        self._hub_entry = self._hub.register(exp_id, self._cancel_seen)
        self._pump = pump_for(store)  # ... and its one sender (journal_pump.py)
        self._pump.add(self)

    # -- what the driver calls --------------------------------------------------------------
    @property
    def pending(self) -> int:
        with self._cv:
            return len(self._ops)

    def transition(self, fields: Mapping[str, Any], event: Mapping[str, Any],
                   stats: TransitionStats | Mapping[str, Any] | None = None, *, ack: bool = False,
                   wait: float = 2.0) -> None:
        """Queue a compare-and-set transition; with `ack`, return only once Redis accepted it."""
        expected = self.version
        self.version += 1
        fields, event, counted = dict(fields), checked(event, EventType.transition), TransitionStats.of(stats)

        def op() -> None:
            at = expected - self.lost  # the pump's thread alone sends, so `lost` only moves between ops
            try:
                self.store.records.transition(self.exp_id, expected_version=at, owner=self.owner,
                                              fields=fields, event=event, stats=counted, node=self.node, durable=ack)
            except TransitionConflict:
                if self._already_applied(at):
                    return
                behind = self._behind(at)
                if behind is None:
                    raise
                self._restore(behind, at, fields, event, counted)


        seq = self._put(op, droppable=False)
        self._wait_for(seq, timeout=60.0 if ack else wait, required=ack)

    def publish(self, event: Mapping[str, Any]) -> None:
        # Checked here (store/events.py), so a malformed event fails its caller, not the writer thread.
        event = {"at": time.time(), **checked(event)}  # when it happened, not when Redis got it
        with self._cv:  # numbered in queue order, which is the order they are sent in
            once = (self._writer, next(self._event_numbers))
            self._put(lambda: self.store.events.publish(self.exp_id, event, once=once), droppable=True)

    def update(self, fields: Mapping[str, Any]) -> None:
        fields = dict(fields)
        self._put(lambda: self.store.records.update(self.exp_id, fields), droppable=True)

    def append_tail(self, lines: list[str], log_bytes: int, replace: bool) -> None:
        """New log lines for the capped tail in Redis (never the whole tail again). They go with the next
        lease poll, in the pump's one pipeline for every run (at most a poll period later)."""
        lines = list(lines)
        self._put(lambda: self.store.log_tail.append(self.exp_id, lines, log_bytes, replace=replace),
                  droppable=True, lazy=True,
                  batched=lambda pipe: self.store.log_tail.append(self.exp_id, lines, log_bytes, replace=replace,
                                                                  client=pipe))

    def call(self, fn: Callable[[], Any]) -> None:
        """Any other write that must happen in order with the rest (e.g. releasing GPUs)."""
        self._put(fn, droppable=False)

    def renew(self, seconds: float) -> None:
        """Keep our lease alive (done by the pump); raises LostOwnership once Redis says it is gone."""
        if seconds != self._lease_seconds:  # called every tick: wake the pump only for a change
            with self._cv:
                self._lease_seconds = seconds
            self._pump.poke()
        self.check()

    def cancel_requested(self) -> bool:
        self.check()
        return self._cancel

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything queued has reached Redis; False if it could not in time."""
        with self._cv:
            target = self._seq
        return self._wait_for(target, timeout=timeout, required=False, through_outage=True)

    def close(self, timeout: float = 30.0) -> bool:
        done = self.flush(timeout)
        self._pump.remove(self)
        self._hub.unregister(self.exp_id, self._hub_entry)
        return done

    def check(self) -> None:
        if self._error is not None:
            raise self._error

    # -- internals ---------------------------------------------------------------------------
    def _put(self, op: Callable[[], Any], *, droppable: bool, lazy: bool = False,
             batched: Batched | None = None) -> int:
        """Queue `op`; the pump sends it at once, or (`lazy`) with the next poll."""
        self.check()
        with self._cv:
            if len(self._ops) >= MAX_BUFFERED:
                self._drop_oldest_droppable()
            self._seq += 1
            seq = self._seq
            self._ops.append(_Op(seq, op, droppable, batched))
            if not self.online:
                self.buffered_total += 1
            self._send_by = min(self._send_by, self._next_poll if lazy else 0.0)
        if not lazy:
            self._pump.poke()  # outside our lock: the pump never holds its own while taking ours
        return seq

    def _drop_oldest_droppable(self) -> None:
        """Out of room after a very long outage: lose the oldest event or field update, never a
        transition (the version chain) nor an ordered call."""
        for i, op in enumerate(self._ops):
            if op.droppable:
                del self._ops[i]
                self.dropped += 1
                return

    def _wait_for(self, seq: int, timeout: float, required: bool, through_outage: bool = False) -> bool:
        """Wait until op `seq` reached Redis. A plain write stops waiting when Redis is away (the
        watch loop must go on); a required one or a flush keeps waiting until `timeout`."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._done < seq and self._error is None:
                left = deadline - time.monotonic()
                if left <= 0 or (not required and not through_outage and not self.online):
                    break
                self._cv.wait(min(left, 0.2))
            reached = self._done >= seq
        self.check()
        if required and not reached:
            raise RedisUnavailable(f"{self.exp_id}: Redis did not acknowledge a required write in "
                                   f"{format_limit(timeout)}")
        return reached

    # -- what the pump calls (its thread) ------------------------------------------------------
    def due_at(self) -> float:
        """When this journal wants the pump next (monotonic): now with ops queued, else at its next poll.
        Read without our lock (the pump holds its own; a stale answer only moves one pass)."""
        if self._error is not None:
            return float("inf")
        return min(self._send_by, self._next_poll)

    def has_ops(self) -> bool:
        return self._error is None and bool(self._ops)

    def batch(self) -> list[tuple[int, Batched]] | None:
        """Every queued op as (seq, batched) when each can go in the pump's pipeline; None otherwise."""
        with self._cv:
            if self._error is not None or not all(op.batched for op in self._ops):
                return None
            return [(op.seq, op.batched) for op in self._ops if op.batched]

    def batch_sent(self, seq: int, error: BaseException | None = None) -> None:
        """The pipeline delivered the ops up to `seq` (or one of them failed: the driver hears of it)."""
        if error is not None:
            log.error("%s: a journal write failed: %s", self.exp_id, error)
            self._fail(error)
            return
        with self._cv:
            while self._ops and self._ops[0].seq <= seq:
                self._ops.popleft()
            self._done = max(self._done, seq)
            if not self._ops:
                self._send_by = float("inf")
            self._cv.notify_all()
        self._set_online(True)

    def poll_due(self, now: float) -> bool:
        return self._error is None and now >= self._next_poll

    def send(self) -> float:
        """Send what is queued, in order; the seconds to wait before the next try when Redis is away (else 0)."""
        try:
            self._send_queued()
            self._set_online(True)
        except REDIS_ERRORS as exc:
            self.offline(exc)
            return self.retry_seconds
        except (TransitionConflict, LostOwnership) as exc:
            self._fail(exc if isinstance(exc, LostOwnership) else LostOwnership(str(exc)))
        except Exception as exc:  # a broken write fails its driver (raised at its next call), not the pump
            log.exception("%s: a journal write failed", self.exp_id)
            self._fail(exc)
        return 0.0

    def poll_request(self, now: float) -> tuple[str, str, float]:
        """(experiment, owner, lease seconds to renew or 0): what `RunControl.poll_runs` asks for this journal.
        The renewal is due half a poll early: a grid poll a few ms before its due time must not wait a period."""
        due = self._renew_due - self._poll_every() / 2
        renew = self._lease_seconds if self._lease_seconds and now >= due else 0.0
        return self.exp_id, self.owner, renew

    def poll_answer(self, now: float, renew: float, owned: bool, cancel: bool) -> None:
        """Ownership, the cancel flag and the lease, as the poll found them."""
        self._set_online(True)
        every = self._poll_every()
        # On a grid shared by the process's journals (a little after the watch loop's ticks, whose log
        # tails are queued by then): every run's poll goes in one pipeline.
        self._next_poll = (time.monotonic() // every + 1) * every + every / 10
        if renew:
            if not owned:
                self._fail(LostOwnership(f"{self.exp_id} is owned by another worker now"))
                return
            self._renew_due = now + self._lease_seconds / 3
        if cancel:
            self._cancel_seen()

    def offline(self, exc: BaseException | None = None) -> None:
        """Redis is away (found by this journal, or by another of the pump): plain writes stop waiting."""
        if self.online and exc is not None:
            log.warning("%s: Redis unreachable (%s); buffering writes", self.exp_id, exc)
        self._set_online(False)

    def _fail(self, exc: BaseException) -> None:
        with self._cv:
            self._error = exc
            self._ops.clear()
            self._cv.notify_all()

    def _send_queued(self) -> None:
        """Send every queued op, in order."""
        while True:
            with self._cv:
                if not self._ops:
                    self._send_by = float("inf")
                    return
                seq, op = self._ops[0].seq, self._ops[0].send
            op()
            with self._cv:
                if self._ops and self._ops[0].seq == seq:
                    self._ops.popleft()
                self._done = max(self._done, seq)
                self._cv.notify_all()

    def _already_applied(self, expected: int) -> bool:
        """A retried write whose first try did reach Redis (only the reply was lost)."""
        rec = self.store.records.get(self.exp_id)
        return rec is not None and rec.owner == self.owner and rec.version > expected

    def _behind(self, expected: int) -> int | None:
        """The record's version when it is still ours but older than what this journal wrote: acknowledged
        writes lost with a Redis master in a failover (replication is asynchronous). None otherwise: someone
        else's now (a lost claim included: another worker's claim is then the one that counts)."""
        rec = self.store.records.get(self.exp_id)
        if rec is None:
            return None
        return rec.version if rec.owner == self.owner and rec.version < expected else None

    def _restore(self, behind: int, expected: int, fields: Mapping[str, Any], event: Mapping[str, Any],
                 stats: TransitionStats) -> None:
        """Reconcile after a failover: the transition again on the version Redis has. Each transition holds
        the whole state (lifecycle, attempts, ctx), so the record is whole again; events lost are named."""
        log.warning("%s: the record is at version %d, behind this driver's %d (writes lost in a Redis "
                    "failover): restoring it from the driver's state", self.exp_id, behind, expected)
        self.store.records.transition(self.exp_id, expected_version=behind, owner=self.owner, fields=fields,
                                      event=event, stats=stats, node=self.node)
        self.lost += expected - behind  # the next transitions compare-and-set on what Redis has now
        self.store.events.publish(self.exp_id, {"type": EventType.warning, "message": (
            f"Redis lost {expected - behind} write(s) of this run in a failover; the record was restored from "
            "its driver's state (events of that moment may be missing)")})

    def _poll_every(self) -> float:
        every = SUBSCRIBED_POLL_SECONDS if self._hub.subscribed(self.exp_id) else POLL_SECONDS
        return min(every, self._lease_seconds / 3) if self._lease_seconds else every

    def _cancel_seen(self) -> None:
        was, self._cancel = self._cancel, True
        if not was and (wake := self.on_cancel) is not None:
            wake()  # the watch loop is asleep until its next pass: act on the stop now

    def _set_online(self, online: bool) -> None:
        with self._cv:
            if online and not self.online:
                log.warning("%s: Redis is back; %d buffered write(s) delivered", self.exp_id, self.buffered_total)
            self.online = online
            self._cv.notify_all()


__all__ = ["Journal", "LostOwnership", "RedisUnavailable", "TransitionConflict"]
