"""Filtered lists read from indexes only: what `GET /v1/experiments` and the console's table share.

Every filter the API and the console offer has an index zset (id -> created_at) that the transition
script keeps: per state, per outcome (finished records only), per node (the record's node, else its target
node), per node and state, per node and outcome, per stage (store/cluster/stages.py). A query is one zset, or (with
a stage) two: store/list_page.lua walks the smaller one newest first and checks the other, so a page
costs the page (and how rare a match is in the smaller zset), never the number of records.

A finished record's hash expires after the retention time by itself; the transition script schedules it in
keys.EXPIRING, and `sweep` (run in the same round trip before every list) takes the expired ids out of every
index, so a count never includes them. Records written before these indexes are indexed once by `backfill`
(store/reindex.lua, in batches, each record read inside the script).

The purpose search reads a bounded window of the newest candidates (store/search_page.lua, one HMGET of
keys.PURPOSES): its result says how many it searched and gives the cursor (a created_at) of the next,
older window.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import redis

from ajet_runner.statemachine.lifecycle import ACTIVE_STATE_NAMES, ACTIVE_STATES, FINISHED, Outcome, State
from ajet_runner.store.keys import (
    EXPIRING,
    EXPIRING_WHERE,
    INDEX,
    INDEX_TMP,
    NODES,
    OUTBOX_DEAD,
    PREFIX,
    PURPOSES,
    STAGES,
    UNFINISHED,
    exp_key,
    node_active_key,
    node_index_key,
    node_outcome_key,
    node_state_key,
    outcome_index_key,
    stage_key,
    stage_meta_key,
    state_index_key,
)
from ajet_runner.store.records import text
from ajet_runner.store.scripts import lua

STATE_NAMES = tuple(s.value for s in State)
OUTCOME_NAMES = tuple(o.value for o in Outcome)
SEARCH_WINDOW = 1000  # candidates one purpose search reads at most (newest first); the rest: "search older"
SWEEP_BATCH = 1000  # expired ids taken out of the indexes per list call at most
BACKFILL_BATCH = 500
INDEX_VERSION = 2  # bump when the indexes change: `backfill` runs again, once
VERSION_KEY = f"{PREFIX}:index_version"
_NODE_PREFIX = node_index_key("\0").split("\0")[0]
_NODE_SUFFIX = node_index_key("\0").split("\0")[1]
_ACTIVE_SUFFIX = node_active_key("\0").split("\0")[1]
_NODE_STATE = node_state_key("\0", "").split("\0")[1]
_NODE_OUTCOME = node_outcome_key("\0", "").split("\0")[1]
# What an expired id leaves besides its node's and stage's index: (key, "z" zset | "s" set).
_FIXED = ((INDEX, "z"), (UNFINISHED, "s"), (PURPOSES, "h"), *((state_index_key(n), "z") for n in STATE_NAMES),
          *((outcome_index_key(n), "z") for n in OUTCOME_NAMES))


@dataclass(frozen=True)
class Query:
    """The filters of a list (empty = any). `outcome` means a finished record with that outcome; `node`
    the record's node, else the node it was submitted to."""

    state: str = ""
    node: str = ""
    outcome: str = ""
    stage: str = ""

    def keys(self) -> list[str] | None:
        """The index zsets whose intersection is the answer (their first one's order); None = nothing can
        match (an outcome with a state other than finished)."""
        if self.outcome and self.state and self.state != FINISHED:
            return None
        keys = []
        if self.node:  # a node's own per-state and per-outcome zsets: node + state is one zset, not two
            keys.append(self._node_key(self.node))
        elif self.outcome:
            keys.append(outcome_index_key(self.outcome))
        elif self.state:
            keys.append(state_index_key(self.state))
        if self.stage:
            keys.append(stage_key(self.stage))
        return keys or [INDEX]

    def _node_key(self, node: str) -> str:
        """The node's zset for the outcome, else the state, else all its records."""
        if self.outcome:
            return node_outcome_key(node, self.outcome)
        return node_state_key(node, self.state) if self.state else node_index_key(node)


@dataclass(frozen=True)
class SearchWindow:
    """One window of a purpose search: the matching ids (newest first) among the `searched` candidates
    created before the cursor `before` ("" = the newest), of `candidates` in all."""

    ids: list[str]
    before: str
    searched: int
    candidates: int
    next_before: str | None  # the cursor of the next (older) window; None when none is left

    @property
    def partial(self) -> bool:
        return bool(self.before) or self.next_before is not None


def unindex(pipe: Any, ids: list[str], nodes: Iterable[str] = ()) -> None:
    """Queue on `pipe` the removal of `ids` from every index (and from the indexes of `nodes`)."""
    pipe.zrem(INDEX, *ids)
    pipe.srem(UNFINISHED, *ids)
    pipe.zrem(EXPIRING, *ids)
    pipe.hdel(EXPIRING_WHERE, *ids)
    pipe.hdel(PURPOSES, *ids)
    for name in STATE_NAMES:
        pipe.zrem(state_index_key(name), *ids)
    for name in OUTCOME_NAMES:
        pipe.zrem(outcome_index_key(name), *ids)
    for node in nodes:
        pipe.zrem(node_index_key(node), *ids)
        pipe.srem(node_active_key(node), *ids)
        for name in STATE_NAMES:
            pipe.zrem(node_state_key(node, name), *ids)
        for name in OUTCOME_NAMES:
            pipe.zrem(node_outcome_key(node, name), *ids)


def _reindex_keys_and_head() -> tuple[list[str], list[str]]:
    """The keys the reindex script writes (every index) and its leading arguments (the state and outcome
    names, the key prefixes and suffixes it builds the rest from)."""
    keys = [INDEX, UNFINISHED, EXPIRING, EXPIRING_WHERE, PURPOSES, *(state_index_key(n) for n in STATE_NAMES),
            *(outcome_index_key(n) for n in OUTCOME_NAMES)]
    head = [",".join(STATE_NAMES), ",".join(OUTCOME_NAMES), exp_key(""), _NODE_PREFIX, _NODE_SUFFIX,
            _ACTIVE_SUFFIX, stage_key(""), ",".join(s.value for s in ACTIVE_STATES), _NODE_STATE, _NODE_OUTCOME]
    return keys, head


class Indexes:
    """The list and search reads, the expiry sweep and the backfill, on one Redis client: what a filtered
    list or a node's scan reads instead of every record."""

    def __init__(self, client: redis.Redis, retention_seconds: float = 0) -> None:
        self.r = client
        self.retention_seconds = retention_seconds  # dead outbox tasks expire after it, as records do (0: never)
        self._list = client.register_script(lua("list_page"))
        self._search = client.register_script(lua("search_page"))
        self._sweep = client.register_script(lua("sweep_expired"))
        self._reindex = client.register_script(lua("reindex"))
        self._members = client.register_script(lua("reindex_members"))

    def _sweep_call(self, client: Any) -> Any:
        return self._sweep(keys=[EXPIRING, EXPIRING_WHERE, *(k for k, _ in _FIXED)],
                           args=[exp_key(""), _NODE_PREFIX, _NODE_SUFFIX, stage_key(""),
                                 "".join(t for _, t in _FIXED), SWEEP_BATCH, _NODE_STATE, _NODE_OUTCOME,
                                 ",".join(OUTCOME_NAMES), stage_meta_key(""), STAGES, OUTBOX_DEAD,
                                 self.retention_seconds], client=client)

    def sweep(self) -> int:
        """Take the ids of records that expired out of every index; how many (at most SWEEP_BATCH a call)."""
        return int(self._sweep_call(self.r))

    def page(self, query: Query, offset: int = 0, limit: int = 100) -> tuple[list[str], int]:
        """Newest first, one page of the matching ids and how many match (expired records swept first)."""
        keys = query.keys()
        if keys is None:
            return [], 0
        pipe = self.r.pipeline(transaction=False)
        self._sweep_call(pipe)
        self._list(keys=[*keys, INDEX_TMP], args=[offset, limit], client=pipe)
        _, (total, page) = pipe.execute()
        return [text(i) for i in page], int(total)

    def search(self, query: Query, needle: str, before: str = "", window: int = SEARCH_WINDOW) -> SearchWindow:
        """The candidates of `query` created before the cursor `before` (a created_at score; "" = from the
        newest), at most `window` ids of the smallest index read, whose purpose contains `needle` (ASCII
        letters case-insensitive)."""
        keys = query.keys()
        if keys is None:
            return SearchWindow([], before, 0, 0, None)
        if before:
            float(before)  # a number, or ValueError (the script would fail on it)
        pipe = self.r.pipeline(transaction=False)
        self._sweep_call(pipe)
        self._search(keys=[*keys, INDEX_TMP, PURPOSES], args=[fold(needle), before, window, exp_key("")], client=pipe)
        _, (total, searched, nxt, found) = pipe.execute()
        return SearchWindow([text(i) for i in found], before, int(searched), int(total),
                            text(nxt) if nxt is not None else None)

    def ids(self, offset: int = 0, limit: int = 1000, newest_first: bool = True) -> list[str]:
        fn = self.r.zrevrange if newest_first else self.r.zrange
        return [text(i) for i in fn(INDEX, offset, offset + limit - 1)]

    def count(self) -> int:
        return int(self.r.zcard(INDEX))

    def ids_in(self, state: str | None = None, node: str | None = None, offset: int = 0, limit: int = 100,
               *, outcome: str | None = None, stage: str | None = None) -> tuple[list[str], int]:
        """Newest first, one page of the experiments matching every filter given, and how many match
        (index zsets only, expired records swept out first)."""
        return self.page(Query(state or "", node or "", outcome or "", stage or ""), offset, limit)

    def node_active(self, node: str, names: Iterable[str]) -> list[dict[str, str]]:
        """The node's launched, unfinished experiments with only the fields asked for: the scan reads
        its own node's index, never the cluster's. Entries that moved on (finished, adopted by another
        node, expired) are dropped from the index as they are met."""
        names = list(dict.fromkeys(["state", "node", *names]))
        recs = self._sort_fields(node_active_key(node), names)
        live = [r for r in recs if r["node"] == node and r["state"] in ACTIVE_STATE_NAMES]
        stale = {r["id"] for r in recs} - {r["id"] for r in live}
        if stale:
            self.r.srem(node_active_key(node), *stale)
        return sorted(live, key=lambda r: r["id"])

    def _sort_fields(self, key: str, names: list[str]) -> list[dict[str, str]]:
        """`names` of every record whose id is in the set or zset `key`, in one command (SORT … GET:
        Redis reads the hashes itself), whatever the number of records."""
        flat = self.r.sort(key, by="nosort", get=["#", *(exp_key("*") + "->" + n for n in names)])
        assert isinstance(flat, list)  # no `store=`: SORT returns the elements
        width = len(names) + 1
        out = []
        for k in range(0, len(flat), width):
            exp_id, values = text(flat[k]), flat[k + 1:k + width]
            rec = {n: (text(v) if v is not None else "") for n, v in zip(names, values, strict=True)}
            rec["id"] = exp_id
            out.append(rec)
        return out

    def queued(self, names: Iterable[str]) -> list[dict[str, str]]:
        """Queued experiments (the whole queue, not every record) with only the fields asked for."""
        names = list(dict.fromkeys(["state", *names]))
        recs = self._sort_fields(state_index_key(State.queued.value), names)
        return [r for r in recs if r["state"] == State.queued.value]

    def prune(self, ids: Iterable[str], keys: Iterable[str] = ()) -> int:
        """Drop ids whose record is gone (expired after the retention time, deleted) from the indexes
        (and from the index zsets `keys`, e.g. the node's or stage's a page was read from)."""
        ids = list(ids)
        if not ids:
            return 0
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.exists(exp_key(i))
        gone = [i for i, alive in zip(ids, pipe.execute(), strict=True) if not alive]
        if gone:
            pipe = self.r.pipeline(transaction=False)
            unindex(pipe, gone)
            for key in keys:
                pipe.zrem(key, *gone)
            pipe.execute()
        return len(gone)

    def backfill(self, force: bool = False) -> bool:
        """Index every record as the transition script would now, once per INDEX_VERSION (idempotent: a
        marker says it was done; `force` runs it anyway). True when it ran."""
        if not force and int(self.r.get(VERSION_KEY) or 0) >= INDEX_VERSION:
            return False
        keys, head = _reindex_keys_and_head()
        ids = [text(i) for i in self.r.zrange(INDEX, 0, -1)]
        for k in range(0, len(ids), BACKFILL_BATCH):
            self._reindex(keys=keys, args=[*head, *ids[k:k + BACKFILL_BATCH]])
        for node in sorted(self._indexed_nodes()):
            self._check_members(node_index_key(node), node, "node")
        for stage in (text(s) for s in self.r.zrange(STAGES, 0, -1)):
            self._check_members(stage_key(stage), stage, "stage")
        self.r.set(VERSION_KEY, INDEX_VERSION)
        return True

    def _indexed_nodes(self) -> set[str]:
        """Every node known as a node or by a node index of its own (a node gone from NODES keeps its index)."""
        nodes = {text(n) for n in self.r.smembers(NODES)}
        for key in self.r.scan_iter(match=node_index_key("*"), count=1000):
            name = text(key)
            nodes.add(name[len(_NODE_PREFIX):len(name) - len(_NODE_SUFFIX)])
        return nodes

    def _check_members(self, key: str, name: str, kind: str) -> None:
        members = [text(i) for i in self.r.zrange(key, 0, -1)]
        for k in range(0, len(members), BACKFILL_BATCH):
            self._members(keys=[key], args=[name, kind, exp_key(""), *members[k:k + BACKFILL_BATCH]])


def fold(needle: str) -> str:
    """The search text as the script compares it: ASCII letters lower-cased, nothing else changed."""
    return needle.encode("utf-8").lower().decode("utf-8")


def purpose_matches(purpose: str, needle: str) -> bool:
    """The search rule in Python (what the script does): for tests and full-scan comparisons."""
    return fold(needle) in fold(purpose)
