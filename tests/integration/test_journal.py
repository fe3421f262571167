"""The driver's journal against a real redis-server that stops answering (SIGSTOP) and comes back."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis

from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.store.per_experiment.event_log import EventLog
from ajet_runner.store.store import Store
from ajet_runner.workers.drive import journal as journal_mod
from ajet_runner.workers.drive.journal import Journal, LostOwnership, RedisUnavailable
from tests.integration.scenario import wait_for


@pytest.fixture()
def server():
    with EmbeddedRedis() as srv:
        yield srv
        os.kill(srv.process.pid, signal.SIGCONT)  # never leave it stopped


def quick_store(url: str) -> Store:
    return Store(redis.Redis.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5))


def test_writes_are_buffered_while_redis_is_away_and_delivered_in_order(server) -> None:
    store = quick_store(server.url)
    store.records.create("e", {"state": "running", "owner": "me"}, {})
    j = Journal(store, "e", "me", version=1, retry_seconds=0.1)
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        for n in range(20):
            j.publish({"type": "progress", "n": n})
        j.transition({"state": "collecting"}, {"type": "transition", "to": "collecting"})
        j.publish({"type": "progress", "n": 20})
        assert time.monotonic() - started < 10  # the watch loop is not held up by a dead Redis
        wait_for(lambda: not j.online, 10, "the journal to notice the outage")
        assert j.cancel_requested() is False and j.pending >= 1
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    assert j.flush(30)
    j.close()
    events = store.events.read("e")
    kinds = [(e["type"], e.get("n", e.get("to"))) for e in events[1:]]
    assert kinds == [*(("progress", n) for n in range(20)), ("transition", "collecting"), ("progress", 20)]
    rec = store.records.raw("e")
    assert rec is not None and rec["state"] == "collecting" and rec["version"] == "2"


def test_a_claim_waits_for_redis_and_says_so_when_it_cannot(server, monkeypatch) -> None:
    store = quick_store(server.url)
    store.records.create("e", {"state": "queued"}, {})
    j = Journal(store, "e", "me", version=1, retry_seconds=0.1)
    j.transition({"state": "launching", "owner": "me"}, {"type": "transition"}, ack=True)
    assert store.records.raw("e")["state"] == "launching"  # type: ignore[index]
    real_wait = j._wait_for
    monkeypatch.setattr(j, "_wait_for", lambda seq, timeout, required, **kw: real_wait(seq, min(timeout, 2), required))
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        with pytest.raises(RedisUnavailable):
            j.transition({"state": "running"}, {"type": "transition"}, ack=True)
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    j.close()


def test_someone_else_taking_over_is_raised_in_the_driver(server) -> None:
    store = quick_store(server.url)
    store.records.create("e", {"state": "running", "owner": "me"}, {})
    j = Journal(store, "e", "me", version=1, retry_seconds=0.1)
    store.records.transition("e", expected_version=1, fields={"owner": "other"}, event={"type": "adopted"})
    with pytest.raises(LostOwnership):  # online, a plain transition waits for its answer
        j.transition({"state": "collecting"}, {"type": "transition"})
    with pytest.raises(LostOwnership):  # and every later call says so too
        j.cancel_requested()
    assert store.records.raw("e")["state"] == "running"  # type: ignore[index]


def test_overflow_drops_events_but_never_a_transition(server, monkeypatch) -> None:
    monkeypatch.setattr(journal_mod, "MAX_BUFFERED", 5)
    store = quick_store(server.url)
    store.records.create("e", {"state": "running", "owner": "me"}, {})
    j = Journal(store, "e", "me", version=1, retry_seconds=0.1)
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        wait_for(lambda: (j.publish({"type": "warning"}), not j.online)[1], 10, "the journal to notice the outage")
        j.transition({"state": "collecting"}, {"type": "transition", "to": "collecting"})
        for n in range(10):
            j.publish({"type": "progress", "n": n})
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
    assert j.flush(30)
    j.close()
    assert j.dropped >= 5
    types = [e["type"] for e in store.events.read("e")]
    assert types.count("transition") == 1 and store.records.raw("e")["state"] == "collecting"  # type: ignore[index]


def test_one_pump_thread_sends_for_every_journal_and_tries_redis_once_per_retry_when_it_is_away(server) -> None:
    """Ten journals of one process: one sender thread, not ten. While Redis is away the pump tries one
    write per retry period (not one per journal, each waiting out the connect timeout), and once Redis is
    back every journal's buffered writes land, in order."""
    store = quick_store(server.url)
    for i in range(10):
        store.records.create(f"p{i}", {"state": "running", "owner": "me"}, {})
    before = {t.name for t in threading.enumerate()}
    journals = [Journal(store, f"p{i}", "me", version=1, retry_seconds=0.3) for i in range(10)]
    started = [t.name for t in threading.enumerate() if t.name not in before]
    # At most the one pump (none if an earlier test of this process started it), no thread per journal
    # ("journal-p0"…: the pump's own name starts the same way, so it is left out by name).
    assert started.count("journal-pump") <= 1
    assert not [n for n in started if n.startswith("journal-") and n != "journal-pump"], started
    for j in journals:
        j.publish({"type": "progress", "n": 0})
    assert all(j.flush(10) for j in journals)
    tries = []
    real = EventLog.publish

    def counted(self, *args, **kwargs):
        tries.append(time.monotonic())
        return real(self, *args, **kwargs)
    os.kill(server.process.pid, signal.SIGSTOP)
    try:
        EventLog.publish = counted  # type: ignore[method-assign]
        for j in journals:
            j.publish({"type": "progress", "n": 1})
        wait_for(lambda: all(not j.online for j in journals), 10, "every journal to go offline")
        t0, n0 = time.monotonic(), len(tries)
        time.sleep(2.0)  # the window whose tries are counted
        window = time.monotonic() - t0
        assert len(tries) - n0 <= window / 0.3 + 2, (len(tries) - n0, window)  # one per retry, not ten
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        EventLog.publish = real  # type: ignore[method-assign]
    assert all(j.flush(30) for j in journals)
    for i, j in enumerate(journals):
        j.close()
        assert [e.get("n") for e in store.events.read(f"p{i}") if e["type"] == "progress"] == [0, 1]


def test_a_write_that_breaks_fails_its_own_driver_and_the_other_journals_go_on(server) -> None:
    store = quick_store(server.url)
    for name in ("bad", "good"):
        store.records.create(name, {"state": "running", "owner": "me"}, {})
    bad, good = Journal(store, "bad", "me", version=1), Journal(store, "good", "me", version=1)

    def broken() -> None:
        raise TypeError("a bug in a write")
    bad.call(broken)
    good.publish({"type": "progress", "n": 1})
    wait_for(lambda: bad.pending == 0 and good.pending == 0, 10, "the pump to serve both")
    with pytest.raises(TypeError, match="a bug in a write"):
        bad.check()
    good.publish({"type": "progress", "n": 2})
    assert good.flush(10)
    assert [e.get("n") for e in store.events.read("good") if e["type"] == "progress"] == [1, 2]
    good.close()


def test_log_tails_and_polls_of_every_journal_go_in_one_pipeline_within_a_poll_period(server) -> None:
    store = quick_store(server.url)
    ids = [f"t{i}" for i in range(8)]
    for i in ids:
        store.records.create(i, {"state": "running", "owner": "me"}, {})
    journals = [Journal(store, i, "me", version=1) for i in ids]
    for j in journals:
        j.renew(15.0)
    assert all(j.flush(10) for j in journals)
    executed: list[int] = []
    real = Store.pipeline

    def counted(self):
        pipe = real(self)
        run = pipe.execute

        def execute(*args, **kwargs):
            executed.append(len(pipe.command_stack))
            return run(*args, **kwargs)
        pipe.execute = execute
        return pipe
    Store.pipeline = counted  # type: ignore[method-assign]
    try:
        queued = time.monotonic()
        for n, j in enumerate(journals):
            j.append_tail([f"line {n}"], 10, replace=True)
        wait_for(lambda: all(store.log_tail.read(i) == [f"line {n}"] for n, i in enumerate(ids)), 15, "the tails")
        landed = time.monotonic() - queued
    finally:
        Store.pipeline = real  # type: ignore[method-assign]
    assert landed <= journal_mod.SUBSCRIBED_POLL_SECONDS + 1.5  # with the next poll, not later
    assert executed and max(executed) >= len(ids) + 1, executed  # the tails and the polls together
    assert len(executed) <= 3, executed
    for j in journals:
        assert j.cancel_requested() is False
        j.close()
