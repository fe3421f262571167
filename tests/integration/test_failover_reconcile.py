"""Reconcile after a failover: writes a master acknowledged and lost (replication is asynchronous) leave the
record behind its driver. The loss is made by hand on a real redis-server (the record put back to an older
version, as a promoted replica that missed the last writes would have it); the driver's journal restores the
record from its own state, says so in an event, and later transitions line up again. A record that is someone
else's now (a lost claim that another worker made since) is not touched."""

from __future__ import annotations

import pytest

from ajet_runner.store.keys import exp_key
from ajet_runner.store.store import Store
from ajet_runner.workers.drive.journal import Journal, LostOwnership

pytestmark = [pytest.mark.integration]


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


def _lose_writes(store: Store, exp_id: str, version: int, state: str) -> None:
    """What a promoted replica that missed the last writes holds: an older version and state."""
    store.r.hset(exp_key(exp_id), mapping={"version": version, "state": state})


def test_a_record_behind_its_own_driver_is_restored_from_the_driver(store: Store) -> None:
    store.records.create("e", {"state": "queued"}, {})
    j = Journal(store, "e", "me", version=1, retry_seconds=0.1)
    j.transition({"state": "launching", "owner": "me"}, {"type": "transition", "to": "launching"}, ack=True)
    j.transition({"state": "running", "attempt": 1}, {"type": "transition", "to": "running"}, ack=True)
    assert store.records.raw("e")["version"] == "3"
    _lose_writes(store, "e", 2, "launching")  # the launching → running write was lost with the old master

    j.transition({"state": "collecting", "attempt": 1}, {"type": "transition", "to": "collecting"}, ack=True)
    rec = store.records.raw("e")
    assert rec["state"] == "collecting" and rec["version"] == "3" and rec["owner"] == "me"
    j.transition({"state": "finished", "outcome": "completed"}, {"type": "transition", "to": "finished"}, ack=True)
    assert j.flush(10)
    j.close()
    rec = store.records.raw("e")
    assert rec["state"] == "finished" and rec["version"] == "4"  # the next one lined up: no second restore
    warnings = [e for e in store.events.read("e") if e["type"] == "warning"]
    assert len(warnings) == 1 and "lost 1 write(s)" in warnings[0]["message"]


def test_a_lost_claim_taken_by_another_worker_is_left_to_it(store: Store) -> None:
    store.records.create("e", {"state": "queued"}, {})
    j = Journal(store, "e", "me", version=1, retry_seconds=0.1)
    j.transition({"state": "launching", "owner": "me"}, {"type": "transition", "to": "launching"}, ack=True)
    # Our claim was lost with the old master; another worker claimed the run since (its lease is live).
    store.r.hset(exp_key("e"), mapping={"version": 2, "owner": "other", "lease_until": store.server_time() + 60})
    with pytest.raises(LostOwnership):
        j.transition({"state": "running"}, {"type": "transition", "to": "running"}, ack=True)
    rec = store.records.raw("e")
    assert rec["owner"] == "other" and rec["state"] == "launching" and rec["version"] == "2"
    assert not [e for e in store.events.read("e") if e["type"] == "warning"]
    with pytest.raises(LostOwnership):  # the driver hears it again at its next call: it stops, touches nothing
        j.check()
