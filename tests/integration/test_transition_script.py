"""store/transition.lua keys its per-state and per-outcome indexes by the names it is given, not by position:
a state the script has never heard of is indexed once the caller names it, and keys that do not match the
names are refused before anything is written."""

from __future__ import annotations

import pytest
import redis

from ajet_runner.store.keys import exp_key, state_index_key
from ajet_runner.store.scripts import lua
from ajet_runner.store.store import Store

pytestmark = [pytest.mark.integration]


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


def _call(store: Store, exp_id: str, fields: dict[str, str]) -> tuple[list[str], list[object]]:
    return store.records._transition_call(exp_id, expected_version=None, fields=fields, event={"type": "transition"})


def test_a_state_named_by_the_caller_gets_its_index_without_a_change_to_the_script(store: Store) -> None:
    store.records.create("e1", {"state": "queued"}, {})
    keys, args = _call(store, "e1", {"state": "paused"})
    states = str(args[6]).split(",")
    keys.insert(17 + len(states), state_index_key("paused"))  # the new state's key after the others
    args[6] = ",".join([*states, "paused"])
    assert store.r.eval(lua("transition"), len(keys), *keys, *args)[0] == 1
    assert store.r.zscore(state_index_key("paused"), "e1") is not None
    assert store.r.zscore(state_index_key("queued"), "e1") is None  # left the state it was in, by name


def test_keys_that_do_not_match_the_names_are_refused_before_any_write(store: Store) -> None:
    store.records.create("e1", {"state": "queued"}, {})
    keys, args = _call(store, "e1", {"state": "running"})
    with pytest.raises(redis.ResponseError, match="keys for"):
        store.r.eval(lua("transition"), len(keys) - 1, *keys[:-1], *args)
    assert store.r.hget(exp_key("e1"), "state") == b"queued" and store.r.hget(exp_key("e1"), "version") == b"1"
    assert store.r.zscore(state_index_key("queued"), "e1") is not None


def test_an_outcome_counted_without_its_buckets_key_is_refused(store: Store) -> None:
    store.records.create("e1", {"state": "collecting"}, {})
    keys, args = store.records._transition_call("e1", expected_version=None, fields={"state": "finished"},
                                        event={"type": "transition"},
                                        stats={"transition": "collecting>finished", "outcome": "vanished",
                                               "duration": 1.0})
    with pytest.raises(redis.ResponseError, match="no duration buckets key"):
        store.r.eval(lua("transition"), len(keys), *keys, *args)
    assert store.r.hget(exp_key("e1"), "state") == b"collecting"
