"""One sender thread per process and Redis server for the journals of all its runs.

Each journal (workers/drive/journal.py) keeps its own queue, versions and errors; the pump sends
them. With a thread per journal, 30 watched runs meant 30 threads each waking every few seconds for
a lease poll or a log-tail write, each a round trip of its own (~0.2 ms of redis-py CPU apiece,
0.006–0.011 % of a core per run). Here one thread serves every journal: ops that must go now
(transitions, events, field updates) are sent at once, in each journal's order; the lease polls
fall on a grid shared by all journals, and each pass sends every due poll, with the log tails
queued since the last one, in one pipeline.

Redis is one server for all of them, so an outage is the pump's: the first write that fails marks
the server down, every journal goes on buffering, and only one write is tried per retry period (not
one per journal, each waiting out the connect timeout) until it gets through.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ajet_runner.store.store import REDIS_DOWN
from ajet_runner.workers.drive.per_server import PerServer

if TYPE_CHECKING:
    from ajet_runner.workers.drive.journal import Batched, Journal

log = logging.getLogger(__name__)
IDLE_WAKE_SECONDS = 5.0  # the longest sleep with nothing due (a new op, a lease change or close() pokes it)


class JournalPump:
    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._journals: list[Journal] = []
        self._poked = False
        self._down_until = 0.0  # monotonic: Redis was unreachable; the next try is not before this
        self._thread: threading.Thread | None = None

    def add(self, journal: Journal) -> None:
        with self._cv:
            self._journals.append(journal)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="journal-pump", daemon=True)
                self._thread.start()
            self._poke_locked()

    def remove(self, journal: Journal) -> None:
        with self._cv:
            if journal in self._journals:
                self._journals.remove(journal)

    def poke(self) -> None:
        """Something is queued or changed: serve the journals now."""
        with self._cv:
            self._poke_locked()

    def _poke_locked(self) -> None:
        self._poked = True
        self._cv.notify()

    # -- the pump's thread --------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._poked:
                    now = time.monotonic()
                    due = min((j.due_at() for j in self._journals), default=now + IDLE_WAKE_SECONDS)
                    due = max(due, self._down_until)
                    if due <= now:
                        break
                    self._cv.wait(min(IDLE_WAKE_SECONDS, due - now))
                self._poked = False
                journals = list(self._journals)
            if time.monotonic() < self._down_until:
                continue  # poked while Redis is away: the ops wait in their queues for the next try
            try:
                retry = self._pass(journals)
            except Exception:  # a bug in one pass must not end the process's only sender (nor call Redis away)
                log.exception("journal pump: a pass failed")
                self._down_until = time.monotonic() + 1.0
                continue
            if retry:  # Redis is away: every journal is offline; one try per retry period
                self._down_until = time.monotonic() + retry
                for journal in journals:
                    journal.offline()

    def _pass(self, journals: list[Journal]) -> float:
        """Each journal's queued ops, then every due poll; what can (log tails, polls) in one pipeline for
        all journals. The seconds to wait when Redis turned out to be away (else 0)."""
        batches, retry = _batches(journals)
        if retry:
            return retry
        now = time.monotonic()
        due = [j for j in journals if j.poll_due(now)]
        first = next(iter(due or [j for j, _ in batches]), None)
        if first is None:
            return 0.0  # nothing to send, nothing to poll
        pipe = first.store.pipeline()  # one server: any journal's client will do
        _add_batches(pipe, batches)
        asks = [j.poll_request(now) for j in due]
        first.store.runs.poll_runs(asks, client=pipe)
        try:
            answers = pipe.execute(raise_on_error=False)
        except REDIS_DOWN as exc:
            first.offline(exc)
            return first.retry_seconds
        _hand_out(answers, batches, due, [renew for _, _, renew in asks], now)
        return 0.0


def _batches(journals: list[Journal]) -> tuple[list[tuple[Journal, list[tuple[int, Batched]]]], float]:
    """Each journal's queued ops that can share the pipeline; an op that cannot (a transition, an event, a
    field update) is sent at once, in order, alone. With the seconds to wait when Redis is away (else 0)."""
    batches: list[tuple[Journal, list[tuple[int, Batched]]]] = []
    for journal in journals:
        if not journal.has_ops():
            continue
        batch = journal.batch()
        if batch is not None:
            batches.append((journal, batch))
        elif retry := journal.send():
            return batches, retry
    return batches, 0.0


def _add_batches(pipe: Any, batches: list[tuple[Journal, list[tuple[int, Batched]]]]) -> None:
    for _, batch in batches:
        for _, add in batch:
            add(pipe)


def _hand_out(answers: list[Any], batches: list[tuple[Journal, list[tuple[int, Batched]]]], due: list[Journal],
              renews: list[float], now: float) -> None:
    """The pipeline's answers back to their journals: the batches' first (a failure among them fails the
    batch), then the polls'."""
    at = 0
    for journal, batch in batches:
        failed = next((a for a in answers[at:at + len(batch)] if isinstance(a, Exception)), None)
        journal.batch_sent(batch[-1][0], failed)
        at += len(batch)
    for journal, renew, answer in zip(due, renews, answers[at:], strict=True):
        if isinstance(answer, Exception):
            journal.batch_sent(-1, answer)
        else:
            journal.poll_answer(now, renew, bool(answer[0]), bool(answer[1]))


pump_for = PerServer(lambda store: JournalPump())  # the process's pump for the Redis server a store reads
