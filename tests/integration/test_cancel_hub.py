"""The stop announcement reaches every journal of a process through one pub/sub connection (cancel_hub.py),
on a real redis-server: not a connection and a thread per run."""

from __future__ import annotations

import threading

import pytest

from ajet_runner.store.store import Store
from ajet_runner.workers.drive.cancel_hub import hub_for
from ajet_runner.workers.drive.journal import Journal
from tests.integration.scenario import wait_for


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


def subscribed_clients(store: Store) -> int:
    return sum(1 for c in store.r.client_list() if int(c.get("sub", 0)) > 0)


def test_many_journals_share_one_subscription_and_each_hears_its_own_stop(store: Store) -> None:
    before = subscribed_clients(store)
    ids = [f"e{i}" for i in range(5)]
    heard: dict[str, threading.Event] = {i: threading.Event() for i in ids}
    journals = []
    for i in ids:
        store.records.create(i, {"state": "running", "owner": "me"}, {})
        j = Journal(store, i, "me", version=1)
        j.on_cancel = heard[i].set
        journals.append(j)
    threads = {t.name for t in threading.enumerate()}
    try:
        wait_for(lambda: all(hub_for(store).subscribed(i) for i in ids), 10, "the subscriptions")
        assert subscribed_clients(store) <= before + 1  # the hub's one connection (if it is new), not five
        assert not any(name.startswith("cancel-e") for name in threads)  # no listener thread per run
        assert store.runs.request_cancel("e3")
        assert heard["e3"].wait(5) and journals[3].cancel_requested()
        assert not any(heard[i].is_set() for i in ids if i != "e3")
    finally:
        for j in journals:
            j.close(timeout=2)
    wait_for(lambda: not any(hub_for(store).subscribed(i) for i in ids), 10, "the closed journals to unsubscribe")


def test_two_registrations_of_one_run_are_kept_apart(store: Store) -> None:
    """An old driver of a run closing while a new one starts in the same process: the old one's unregister
    must not deafen the new one."""
    hub = hub_for(store)
    old, new = threading.Event(), threading.Event()
    first = hub.register("r1", old.set)
    hub.register("r1", new.set)
    hub.unregister("r1", first)
    wait_for(lambda: hub.subscribed("r1"), 10, "the subscription")
    store.records.create("r1", {"state": "running", "owner": "me"}, {})
    assert store.runs.request_cancel("r1")
    assert new.wait(5)
    assert not old.is_set()


def test_a_failing_callback_does_not_deafen_the_other_runs(store: Store) -> None:
    hub = hub_for(store)
    heard = threading.Event()

    def broken() -> None:
        raise RuntimeError("a journal's bug")

    hub.register("bad", broken)
    hub.register("good", heard.set)
    wait_for(lambda: hub.subscribed("bad") and hub.subscribed("good"), 10, "the subscriptions")
    for exp_id in ("bad", "good"):
        store.records.create(exp_id, {"state": "running", "owner": "me"}, {})
    assert store.runs.request_cancel("bad")
    assert store.runs.request_cancel("good")
    assert heard.wait(5)
