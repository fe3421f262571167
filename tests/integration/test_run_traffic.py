"""A watched run's Redis traffic against a real redis-server: the capped log tail, the combined
ownership/cancel/lease look, and the stop announcement that wakes a journal at once."""

from __future__ import annotations

import time

import pytest

from ajet_runner.store.keys import log_tail_key
from ajet_runner.store.store import Store
from ajet_runner.workers.drive import journal as journal_mod
from ajet_runner.workers.drive.journal import Journal, LostOwnership
from tests.integration.scenario import wait_for


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


def test_the_tail_is_appended_capped_and_replaced_and_never_outlives_its_record(store: Store) -> None:
    store.records.create("e", {"state": "running"}, {})
    assert store.log_tail.append("e", [f"l{i}" for i in range(5)], 50, cap=4) == 4
    assert store.log_tail.read("e") == ["l1", "l2", "l3", "l4"]
    assert store.log_tail.append("e", ["m"], 60, cap=4) == 4
    assert store.log_tail.read("e", 2) == ["l4", "m"] and store.records.raw("e")["log_bytes"] == "60"
    assert store.log_tail.append("e", ["new"], 70, replace=True, cap=4) == 1
    assert store.log_tail.read("e") == ["new"]
    store.records.delete("e")
    assert not store.r.exists(log_tail_key("e"))
    assert store.log_tail.append("e", ["late"], 80) == -1  # a deleted experiment is not recreated
    assert not store.r.exists(log_tail_key("e")) and store.records.raw("e") is None


def test_an_older_records_json_tail_is_still_shown(store: Store) -> None:
    store.records.create("old", {"state": "finished", "log_tail": ["a", "b", "c"]}, {})
    assert store.log_tail.read("old", 2) == ["b", "c"]


def test_one_look_says_ownership_and_cancel_and_renews_only_when_asked(store: Store) -> None:
    store.records.create("e", {"state": "running", "owner": "me", "lease_until": 0}, {})
    assert store.runs.poll_run("e", "me") == (True, False)
    assert float(store.records.raw("e")["lease_until"]) == 0
    assert store.runs.poll_run("e", "me", 30) == (True, False)
    assert float(store.records.raw("e")["lease_until"]) > store.server_time() + 25
    assert store.runs.request_cancel("e")
    assert store.runs.poll_run("e", "other", 30) == (False, True)
    assert float(store.records.raw("e")["lease_until"]) < store.server_time() + 31  # not renewed for a stranger


def test_a_stop_request_wakes_the_journal_at_once_not_at_its_poll(store: Store, monkeypatch) -> None:
    monkeypatch.setattr(journal_mod, "SUBSCRIBED_POLL_SECONDS", 60.0)  # only the announcement can be quick
    monkeypatch.setattr(journal_mod, "POLL_SECONDS", 60.0)
    store.records.create("e", {"state": "running", "owner": "me"}, {})
    woke: list[float] = []
    j = Journal(store, "e", "me", version=1)
    j.on_cancel = lambda: woke.append(time.monotonic())
    try:
        wait_for(lambda: j._hub.subscribed("e"), 10, "the cancel subscription")
        time.sleep(0.2)  # past the first poll
        t0 = time.monotonic()
        assert store.runs.request_cancel("e")
        wait_for(lambda: woke, 10, "the wake-up", interval=0.01)
        assert woke[0] - t0 < 5 and j.cancel_requested()
    finally:
        j.close(timeout=2)


def test_losing_the_lease_is_still_noticed_at_renewal(store: Store) -> None:
    store.records.create("e", {"state": "running", "owner": "me"}, {})
    j = Journal(store, "e", "me", version=1, retry_seconds=0.1)
    try:
        j.renew(1.5)
        store.records.update("e", {"owner": "thief"})
        with pytest.raises(LostOwnership):
            wait_for(lambda: j.renew(1.5), 10, "the lost lease to be raised")
    finally:
        with pytest.raises(LostOwnership):
            j.close(timeout=2)  # the journal stays failed: the driver must not write as owner again
