"""The experiment records: one hash per experiment (keys.exp_key), written by compare-and-set transitions.

Every state change is a compare-and-set on the record's `version` inside one Lua script (store/transition.lua)
that also appends the event to the experiment's stream and the global stream, keeps the indexes and the
/metrics counters, so a transition is never persisted without its event, and two workers can never both
launch one experiment (the `start` transition is the claim). The hash itself is a flat map of strings (JSON
for `JSON_FIELDS`); `decode` reads it, `ExperimentRecord.from_hash` types it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

import redis
from redis.client import Pipeline
from redis.typing import EncodableT, FieldT

from ajet_runner.statemachine.lifecycle import EventType, Outcome, State
from ajet_runner.store.cluster.stats import TransitionStats
from ajet_runner.store.events import checked
from ajet_runner.store.keys import (
    EXPIRING,
    EXPIRING_WHERE,
    GLOBAL_STREAM,
    INDEX,
    PURPOSES,
    RESULT_DIRS,
    STAGES,
    UNFINISHED,
    duration_bucket_key,
    exp_key,
    log_tail_key,
    node_active_key,
    node_index_key,
    node_outcome_key,
    node_state_key,
    outcome_index_key,
    published_key,
    stage_key,
    stage_meta_key,
    state_index_key,
    stats_key,
    stream_key,
)
from ajet_runner.store.per_experiment.filters import unindex
from ajet_runner.store.records import ExperimentRecord, text
from ajet_runner.store.scripts import lua

__all__ = ["CLAIM_FIELD", "DURATION_BUCKETS", "GLOBAL_STREAM_MAXLEN", "JSON_FIELDS", "STREAM_MAXLEN", "Records",
           "ResultDirTaken", "TransitionConflict", "decode", "encode"]

log = logging.getLogger(__name__)
STREAM_MAXLEN = 10_000
GLOBAL_STREAM_MAXLEN = 100_000
# Under Sentinel, a transition waits this long for one replica to have it (WAIT 1): replication is asynchronous,
# and a claim the master acknowledged and lost in a failover could otherwise be made a second time.
REPLICA_WAIT_MS = 100
REPLICA_WAIT_CLAIM_MS = 1000  # ... and a claim (or an adoption) longer: a claim lost is a run launched twice
STATE_NAMES = tuple(s.value for s in State)  # the order of the per-state index keys given to the script
OUTCOME_NAMES = tuple(o.value for o in Outcome)  # the duration-bucket keys whose expiry the script refreshes
CLAIM_FIELD = "result_dir_claim"  # the record's claimed result dir (a real path), released when it finishes
DURATION_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 28800.0, 86400.0, float("inf"))

# JSON-encoded hash fields (everything else is a plain string).
JSON_FIELDS = (
    "lifecycle", "latest_metrics", "handle", "gpus", "blueprint_json", "problems", "config_changes", "ctx",
    "log_tail", "best_metrics",
)


class TransitionConflict(RuntimeError):
    """Someone else changed the experiment first (version moved, or another live owner)."""


class ResultDirTaken(TransitionConflict):
    """The result dir (or one inside it, or one it is inside) is claimed by a live experiment."""

    def __init__(self, result_dir: str, holder: str, state: str, held_dir: str) -> None:
        self.result_dir, self.holder, self.state, self.held_dir = result_dir, holder, state, held_dir
        super().__init__(f"result dir {result_dir} is taken by experiment {holder} ({state}, dir {held_dir})")


def encode(fields: Mapping[str, Any]) -> list[str]:
    """Fields as the hash stores them, flat (name, value, name, value ...): JSON for `JSON_FIELDS`."""
    flat: list[str] = []
    for k, v in fields.items():
        if k in JSON_FIELDS:
            v = json.dumps(v, default=str)
        elif v is None:
            v = ""
        elif isinstance(v, bool):
            v = "1" if v else "0"
        flat += [k, str(v)]
    return flat


def _mapping(fields: Mapping[str, Any]) -> dict[FieldT, EncodableT]:
    return dict(zip(*[iter(encode(fields))] * 2, strict=True))


_Key = TypeVar("_Key", bound="bytes | str")


def decode(raw: Mapping[_Key, Any]) -> dict[str, Any]:
    """A Redis hash (bytes from the server, or str fields a caller already picked) → a dict with JSON fields decoded."""
    out: dict[str, Any] = {}
    for k, v in raw.items():
        key = k.decode() if isinstance(k, bytes) else k
        val = v.decode() if isinstance(v, bytes) else v
        if key in JSON_FIELDS:
            try:
                out[key] = json.loads(val) if val else None
            except json.JSONDecodeError:
                out[key] = None
        else:
            out[key] = val
    return out


def _write_new_record(pipe: Pipeline, exp_id: str, record: dict[str, Any], result_dir_key: str, now: float) -> None:
    """Queue the record's write and its index entry: through the claim script when it claims a result dir."""
    if result_dir_key:
        pipe.eval(lua("claim_result_dir"), 3, RESULT_DIRS, exp_key(exp_id), INDEX,
                  result_dir_key, exp_id, exp_key(""), "0", now, *encode(record))
    else:
        pipe.hset(exp_key(exp_id), mapping=_mapping(record))
        pipe.zadd(INDEX, {exp_id: now})


def _add_to_stage(pipe: Pipeline, exp_id: str, stage: str, settings: Mapping[str, str], now: float) -> None:
    """Queue the stage's index entry (and its settings), written only if the record was; nothing without a stage."""
    if not stage:
        return
    flat = [x for pair in settings.items() for x in pair]
    pipe.eval(lua("stage_member"), 4, exp_key(exp_id), stage_key(stage), STAGES, stage_meta_key(stage),
              stage, now, *flat)


def _check_created(exp_id: str, replies: list[Any], result_dir_key: str) -> None:
    """ResultDirTaken when the claim lost the result dir; TransitionConflict if the `submitted` transition
    was refused (cannot happen for a record written in the same transaction; kept as the script's contract)."""
    if result_dir_key and not int(replies[0][0]):
        _, holder, state, held = (text(x) for x in replies[0])
        raise ResultDirTaken(result_dir_key, holder, state, held)
    ok, detail = replies[1 if result_dir_key else 2]
    if not ok:
        raise TransitionConflict(f"experiment {exp_id}: {text(detail)} check failed")


class Records:
    """The experiment hashes: created, read, updated and moved through their transitions."""

    def __init__(self, client: redis.Redis, retention_seconds: int, replicated: bool) -> None:
        self.r = client
        self.retention_seconds = retention_seconds  # a finished record expires after this (0: never)
        self.replicated = replicated  # a Sentinel-managed master: transitions wait for a replica
        self._transition = client.register_script(lua("transition"))

    # -- writing ---------------------------------------------------------------------------
    def create(self, exp_id: str, fields: Mapping[str, Any], event: Mapping[str, Any], *,
               result_dir_key: str = "", also: Callable[[Pipeline], object] | None = None,
               stage_settings: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A new record, indexed, with its `submitted` transition; returns the record as stored.

        One MULTI, so nothing is half-written: the record (version 0), its index entries, the transition
        script (sent whole with EVAL: a script-cache miss cannot split the transaction), whatever `also` adds
        to the transaction, and the read-back of the record.

        With `result_dir_key` (a real path) the record is written by the claim script
        (store/claim_result_dir.lua), which first claims that result dir: the claim and the record are one
        compare-and-set, so of concurrent submissions naming one dir exactly one gets a record. The others
        raise ResultDirTaken and write nothing (the transition that follows finds no record). `also` cannot
        be combined with a claim (it would run whatever the claim decided): add the job with `admit`.
        `stage_settings` (the stage's dir, webhook URL) are written with the stage's index, only if the record
        was (store/stage_member.lua)."""
        if result_dir_key and also is not None:
            raise ValueError("a claimed create writes no job: add it with admit() once the claim is won")
        now = time.time()
        record = {"id": exp_id, "version": 0, "created_at": now, **fields}
        if result_dir_key:
            record[CLAIM_FIELD] = result_dir_key
        keys, args = self._transition_call(exp_id, expected_version=0, fields={}, event={"type": EventType.submitted,
                                                                                  **event},
                                           node=str(fields.get("target_node") or ""))
        pipe = self.r.pipeline(transaction=True)
        pipe.multi()  # explicit: what `also` adds (RQ's enqueue with a pipeline) expects a MULTI under way
        _write_new_record(pipe, exp_id, record, result_dir_key, now)
        pipe.eval(lua("transition"), len(keys), *keys, *args)
        _add_to_stage(pipe, exp_id, str(fields.get("stage") or ""), stage_settings or {}, now)
        if also is not None:
            also(pipe)
        pipe.hgetall(exp_key(exp_id))
        replies = pipe.execute()
        _check_created(exp_id, replies, result_dir_key)
        return decode(replies[-1])

    def admit(self, exp_id: str, fields: Mapping[str, Any], also: Callable[[Pipeline], object]) -> dict[str, Any]:
        """After a claimed `create` (and whatever had to wait for the claim, e.g. archiving the dir's earlier
        run): `fields` and what `also` adds (the RQ job) in one MULTI; returns the record as stored."""
        pipe = self.r.pipeline(transaction=True)
        pipe.multi()
        if fields:
            pipe.hset(exp_key(exp_id), mapping=_mapping(fields))
        also(pipe)
        pipe.hgetall(exp_key(exp_id))
        return decode(pipe.execute()[-1])

    def withdraw(self, exp_id: str) -> None:
        """Take back a claimed record that was never admitted (its submission was refused after the claim):
        the record, its events and indexes go, and its result dir claim is released (`delete`)."""
        self.delete(exp_id)

    def transition(
        self,
        exp_id: str,
        *,
        expected_version: int | None,
        fields: Mapping[str, Any],
        event: Mapping[str, Any],
        owner: str = "",
        stats: TransitionStats | Mapping[str, Any] | None = None,
        node: str = "",
        durable: bool = False,
    ) -> int:
        """Compare-and-set `fields` and publish `event` atomically; returns the new version. `durable` (a claim):
        under Sentinel, wait longer for a replica to have it.

        The script also keeps the indexes: per state, and (given the `node` the caller acts for) the
        node's active set and experiment index; a finished record starts to expire."""
        keys, args = self._transition_call(exp_id, expected_version=expected_version, fields=fields, event=event,
                                           owner=owner, stats=stats, node=node)
        if fields.get("state") == State.finished.value:
            ok, detail = self._finishing(exp_id, keys, args)
        elif self.replicated:
            wait_ms = REPLICA_WAIT_CLAIM_MS if durable else REPLICA_WAIT_MS
            ok, detail = self._replicated_transition(exp_id, keys, args, wait_ms)
        else:
            ok, detail = self._transition(keys=keys, args=args)
        if not ok:
            raise TransitionConflict(f"experiment {exp_id}: {text(detail)} check failed")
        return int(text(detail))

    def _replicated_transition(self, exp_id: str, keys: list[str], args: list[Any], wait_ms: int) -> Any:
        """The transition, then WAIT for one replica on the same connection (one pipeline): once this returns,
        a failover keeps the write (Sentinel promotes the replica that is most up to date). A replica that
        does not answer in `wait_ms` is logged, not waited for: the runs go on with one server.
        The finishing transition is not waited for: its result dir's finish.flag proves it (reconcile)."""
        pipe = self.r.pipeline(transaction=False)
        self._transition(keys=keys, args=args, client=pipe)
        pipe.execute_command("WAIT", 1, wait_ms)
        answer, acked = pipe.execute()
        if not int(acked or 0):
            log.warning("%s: no replica confirmed a transition within %d ms (a failover now could lose it)",
                        exp_id, wait_ms)
        return answer

    def _finishing(self, exp_id: str, keys: list[str], args: list[Any]) -> Any:
        """The finishing transition and its outbox task (store/cluster/outbox.py) in one MULTI: the notice that it
        finished is never lost, nor queued for a transition that did not happen."""
        from ajet_runner.store.cluster.outbox import queue_finish

        pipe = self.r.pipeline(transaction=True)
        pipe.eval(lua("transition"), len(keys), *keys, *args)
        queue_finish(pipe, exp_id)
        return pipe.execute()[0]

    def _transition_call(self, exp_id: str, *, expected_version: int | None, fields: Mapping[str, Any],
                         event: Mapping[str, Any], owner: str = "",
                         stats: TransitionStats | Mapping[str, Any] | None = None,
                         node: str = "") -> tuple[list[str], list[Any]]:
        """The KEYS and ARGV of the transition script (store/transition.lua documents them)."""
        counted = TransitionStats.of(stats)
        packed = counted.packed(["inf" if b == float("inf") else repr(b) for b in DURATION_BUCKETS])
        payload = {"at": time.time(), **checked(event, EventType.transition)}
        keys = [exp_key(exp_id), stream_key(exp_id), GLOBAL_STREAM, UNFINISHED,
                stats_key("transitions"), stats_key("outcomes"), stats_key("duration_sum"),
                stats_key("repairs"), stats_key("advised"), stats_key("result_write_failures"),
                node_active_key(node or "-"), EXPIRING, log_tail_key(exp_id), published_key(exp_id), RESULT_DIRS,
                EXPIRING_WHERE, PURPOSES,
                # then by name, in the order ARGV[7] and ARGV[10] list the names: the script looks them up so
                *(state_index_key(n) for n in STATE_NAMES),
                *(k for o in OUTCOME_NAMES for k in (outcome_index_key(o), duration_bucket_key(o)))]
        node_prefix, node_suffix = node_index_key("\0").split("\0")
        args = [
            "" if expected_version is None else str(expected_version),
            owner,
            json.dumps(payload, default=str),
            json.dumps(packed),
            STREAM_MAXLEN,
            GLOBAL_STREAM_MAXLEN,
            ",".join(STATE_NAMES),
            node,
            self.retention_seconds,
            ",".join(OUTCOME_NAMES),
            node_prefix,
            node_suffix,
            node_state_key("\0", "").split("\0")[1],
            node_outcome_key("\0", "").split("\0")[1],
            *encode(fields),
        ]
        return keys, args

    def update(self, exp_id: str, fields: Mapping[str, Any]) -> None:
        """Fields that are not state (latest metrics, lease, handle): no version bump, no event."""
        if fields:
            self.r.hset(exp_key(exp_id), mapping=_mapping(fields))

    def set_once(self, exp_id: str, name: str, value: Any) -> bool:
        """Set a field of an existing record only if it is not set yet (HSETNX); True if this call set it."""
        key = exp_key(exp_id)
        if not self.r.exists(key):
            return False
        _, encoded = encode({name: value})
        return bool(self.r.hsetnx(key, name, encoded))

    def delete(self, exp_id: str) -> None:
        """The record, its events and indexes go; a result dir it still claims is released with them."""
        node, target, claim, stage = self.r.hmget(exp_key(exp_id), "node", "target_node", CLAIM_FIELD, "stage")
        nodes = {text(n) for n in (node, target) if n}
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(exp_key(exp_id), stream_key(exp_id), published_key(exp_id), log_tail_key(exp_id))
        if stage:
            pipe.zrem(stage_key(text(stage)), exp_id)
        unindex(pipe, [exp_id], nodes)
        if claim:
            pipe.eval(lua("hdel_if_owner"), 1, RESULT_DIRS, text(claim), exp_id)
        pipe.execute()

    # -- reading ---------------------------------------------------------------------------
    def get(self, exp_id: str) -> ExperimentRecord | None:
        """The experiment's record, typed (None when it does not exist)."""
        raw = self.raw(exp_id)
        return ExperimentRecord.from_hash(raw) if raw is not None else None

    def raw(self, exp_id: str) -> dict[str, Any] | None:
        """The record's hash as stored, JSON fields decoded (None when it does not exist): for the views that
        show it whole (the API's and the console's); code that reads a field reads `get`'s attributes."""
        raw = self.r.hgetall(exp_key(exp_id))
        return decode(raw) if raw else None

    def exists(self, exp_id: str) -> bool:
        return bool(self.r.exists(exp_key(exp_id)))

    def flag_set(self, exp_id: str, name: str) -> bool:
        """A "1"/"0" field of the record, e.g. cancel_requested or delete_requested."""
        return self.r.hget(exp_key(exp_id), name) == b"1"

    def all(self, ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Records for `ids` (default: every experiment), in one round trip."""
        wanted = list(ids) if ids is not None else [text(i) for i in self.r.zrevrange(INDEX, 0, 999_999)]
        pipe = self.r.pipeline(transaction=False)
        for i in wanted:
            pipe.hgetall(exp_key(i))
        return [decode(raw) for raw in pipe.execute() if raw]

    def unfinished(self) -> list[dict[str, Any]]:
        """Records of every experiment not yet finished: what a node scans, without reading the rest."""
        return self.all(sorted(text(i) for i in self.r.smembers(UNFINISHED)))

    def partial(self, ids: Iterable[str], names: Iterable[str]) -> list[dict[str, Any]]:
        """Only `names` of each record, decoded like `get` (JSON fields parsed, absent fields left out), in
        `ids` order (one pipeline); records that are gone (no `id` field) are left out."""
        return self.partial_and_gone(ids, names)[0]

    def partial_and_gone(self, ids: Iterable[str], names: Iterable[str]) -> tuple[list[dict[str, Any]], list[str]]:
        """`partial`, and the ids whose record is gone (no `id` field: the caller prunes them)."""
        ids, names = list(ids), list(names)
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(exp_key(i), names)
        out, gone = [], []
        for exp_id, values in zip(ids, pipe.execute(), strict=True):
            raw: dict[bytes | str, bytes | str] = {k: v for k, v in zip(names, values, strict=True) if v is not None}
            if raw.get("id"):
                out.append(decode(raw))
            else:
                gone.append(exp_id)
        return out, gone

    def fields_of(self, ids: list[str], names: Iterable[str]) -> list[dict[str, str]]:
        """Only `names` of each record (one pipeline); records that are gone are left out."""
        names = list(names)
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hmget(exp_key(i), names)
        out = []
        for exp_id, values in zip(ids, pipe.execute(), strict=True):
            if all(v is None for v in values):
                continue
            rec = {k: (v.decode() if v is not None else "") for k, v in zip(names, values, strict=True)}
            rec["id"] = exp_id
            out.append(rec)
        return out
