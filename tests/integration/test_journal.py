"""The driver's journal against a real redis-server that stops answering (SIGSTOP) and comes back."""

from __future__ import annotations

import os
import signal
import time

import pytest
import redis

from ajet_runner.service.embedded import EmbeddedRedis
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
    store.create("e", {"state": "running", "owner": "me"}, {})
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
    events = store.events("e")
    kinds = [(e["type"], e.get("n", e.get("to"))) for e in events[1:]]
    assert kinds == [*(("progress", n) for n in range(20)), ("transition", "collecting"), ("progress", 20)]
    rec = store.get("e")
    assert rec is not None and rec["state"] == "collecting" and rec["version"] == "2"


def test_a_claim_waits_for_redis_and_says_so_when_it_cannot(server, monkeypatch) -> None:
    store = quick_store(server.url)
    store.create("e", {"state": "queued"}, {})
    j = Journal(store, "e", "me", version=1, retry_seconds=0.1)
    j.transition({"state": "launching", "owner": "me"}, {"type": "transition"}, ack=True)
    assert store.get("e")["state"] == "launching"  # type: ignore[index]
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
    store.create("e", {"state": "running", "owner": "me"}, {})
    j = Journal(store, "e", "me", version=1, retry_seconds=0.1)
    store.transition("e", expected_version=1, fields={"owner": "other"}, event={"type": "adopted"})
    with pytest.raises(LostOwnership):  # online, a plain transition waits for its answer
        j.transition({"state": "collecting"}, {"type": "transition"})
    with pytest.raises(LostOwnership):  # and every later call says so too
        j.cancel_requested()
    assert store.get("e")["state"] == "running"  # type: ignore[index]


def test_overflow_drops_events_but_never_a_transition(server, monkeypatch) -> None:
    monkeypatch.setattr(journal_mod, "MAX_BUFFERED", 5)
    store = quick_store(server.url)
    store.create("e", {"state": "running", "owner": "me"}, {})
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
    types = [e["type"] for e in store.events("e")]
    assert types.count("transition") == 1 and store.get("e")["state"] == "collecting"  # type: ignore[index]
