"""The /metrics read: everything one scrape needs from Redis, in three pipelined round trips.

What service/cluster_metrics.py turns into Prometheus families; the Redis reads live here, in the store layer
(`Store.snapshot`), so no module above it touches the client. Nothing walks every record: the counts come from
the per-state indexes, the per-experiment fields only for the live experiments and those finished within the
TTL, and queued experiments are aggregated (`read_snapshot`). Each record's fields are decoded once and kept
(`Row`, `RowCache`) until they change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rq.job import Job
from rq.queue import Queue
from rq.utils import utcparse

from ajet_runner.statemachine.lifecycle import FINISHED, Outcome, State
from ajet_runner.store.keys import (
    EXPIRING,
    NODES,
    STAGES,
    duration_bucket_key,
    exp_key,
    node_key,
    stage_key,
    state_index_key,
    stats_key,
)
from ajet_runner.store.naming import DEFAULT_QUEUE, node_queue
from ajet_runner.store.scripts import lua

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ajet_runner.store.store import Store

# How many job ids from the head of a queue are looked at for the oldest one: `at_front` jobs
# (adoptions, high priority) sit newest-first before the FIFO part, so the oldest job is at the
# boundary, which is near the head unless dozens of jobs were pushed to the front.
QUEUE_HEAD_SCAN = 32
STATE_NAMES = tuple(s.value for s in State)
# States whose experiments get per-experiment series: launched and not finished. Queued ones are only counted
# (aggregates per target node): thousands can wait, and a scrape must not pay for each of them.
LIVE_STATES = tuple(s for s in STATE_NAMES if s not in (State.queued.value, FINISHED))
DETAIL_FIELDS = ("state", "purpose", "node", "started_at", "finished_at", "created_at",
                 "max_seconds", "attempt", "latest_metrics", "target_node", "nnodes")
STATS = ("transitions", "outcomes", "repairs", "advised", "duration_sum", "result_write_failures")
OUTCOMES = tuple(o.value for o in Outcome)
_FINISHED_VALUES = (FINISHED, FINISHED.encode())  # a state field as Redis returns it, or already decoded
_FINISHED_AT = DETAIL_FIELDS.index("finished_at")


def as_text(value: Any) -> str:
    if value is None:
        return ""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def as_num(value: Any) -> float | None:
    """A finite-or-not float from a Redis/JSON value; None when absent or not a number."""
    kind = type(value)
    if kind is float:  # JSON numbers: the common case, first (a 10,000-run scrape calls this 100,000 times)
        return value
    if value is None or kind is bool:
        return None
    if kind is int:
        return float(value)
    try:
        return float(value.decode("utf-8", "replace") if kind is bytes else value if kind is str else as_text(value))
    except (ValueError, TypeError):
        return None


def _hash(raw: dict[bytes, bytes]) -> dict[str, float]:
    out = {}
    for k, v in raw.items():
        num = as_num(v)
        if num is not None:
            out[as_text(k)] = num
    return out


@dataclass
class Snapshot:
    """Everything one scrape needs, read from Redis in three pipelined round trips."""

    now: float
    states: dict[str, int] = field(default_factory=dict)
    experiments: list[dict[str, Any]] = field(default_factory=list)  # the ones that get gauges: live, just finished
    queued: list[tuple[str, float]] = field(default_factory=list)  # each queued one: (target node or "", created_at)
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    buckets: dict[str, dict[str, float]] = field(default_factory=dict)  # outcome -> stored le -> count
    nodes: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # None: heartbeat hash expired
    queues: dict[str, tuple[int, float | None]] = field(default_factory=dict)  # name -> (jobs, oldest enqueued)
    rows: list[Row] = field(default_factory=list)  # the raw fields behind each of `experiments`, in order


@dataclass
class Row:
    """One experiment's fields as Redis returned them, decoded once, and its series text (all but the
    elapsed time, which moves with the clock) written once: reused by the next scrape while the
    fields are the same bytes, so a scrape pays parsing and formatting only for what changed."""

    raw: tuple[Any, ...]
    rec: dict[str, Any]
    lines: tuple[tuple[str, str], ...] | None = None  # (family, line) in family order, elapsed excluded
    started: float = 0.0
    end: float | None = None  # finished_at of a finished run: its elapsed time is frozen


class RowCache:
    """The rows of the last scrape (per process). Rows are replaced, never changed, so a scrape
    racing another one at worst decodes a record again."""

    def __init__(self) -> None:
        self.rows: dict[Any, Row] = {}  # by the id as Redis returned it


ROWS = RowCache()


def _row(exp_id: Any, values: Any, cached: Row | None) -> Row:
    raw = tuple(values)
    if cached is not None and cached.raw == raw:
        return cached
    rec: dict[str, Any] = {k: v.decode("utf-8", "replace") if type(v) is bytes else as_text(v)
                           for k, v in zip(DETAIL_FIELDS, raw, strict=True)}
    rec["id"] = as_text(exp_id)
    try:
        rec["latest_metrics"] = json.loads(rec["latest_metrics"]) if rec["latest_metrics"] else {}
    except json.JSONDecodeError:
        rec["latest_metrics"] = {}
    started, end = run_times(rec)
    return Row(raw=raw, rec=rec, started=started, end=end)


def read_snapshot(store: Store, finished_ttl: float, now: float, cache: RowCache | None = None) -> Snapshot:
    """`cache`: the rows of the previous scrape, reused where a record's fields did not change
    (and replaced by this scrape's).

    The cost follows the live experiments, never the records kept: the counts per state are the per-state
    indexes' sizes (store/per_experiment/filters.py, swept of expired records first), the records with gauges are read
    from the indexes of the live states (one SORT … GET each: Redis walks the hashes in C) and the ones
    finished within `finished_ttl` from the expiry schedule (keys.EXPIRING; a store that keeps records
    for ever has none, and reads its finished ones' finish times instead). Queued experiments get no
    per-experiment series: only their target node and age are read, for the aggregates."""
    r = store.r
    snap = Snapshot(now=now)
    keep = store.retention_seconds
    store.indexes.sweep()  # expired records out of the indexes: the counts below never include them
    horizon = now - finished_ttl

    # 1: counts per state, the live records' fields, the recently finished ids, the queued experiments'
    #    target nodes and ages, node names, counters.
    pipe = r.pipeline(transaction=False)
    _ask_first(pipe, keep, horizon)
    pending = _take_first(iter(pipe.execute()), snap, keep, horizon)
    pending.queue_keys = [Queue(name, connection=r).key for name in pending.queue_names]

    # 2: (a store keeping records for ever) the recently finished records' fields, node hashes, queue lengths, heads.
    pipe = r.pipeline(transaction=False)
    _ask_second(pipe, pending)
    heads = _take_second(iter(pipe.execute()), snap, pending, cache)

    # 3: enqueue times of the jobs at the queue heads.
    pipe = r.pipeline(transaction=False)
    _ask_third(pipe, heads)
    _take_third(pipe.execute(), snap, pending.queue_names, heads)
    return snap


@dataclass
class _Pending:
    """What the first round trip found that the next two read further."""

    horizon: float  # finished before it: no gauges
    details: list[tuple[Any, Any]]  # (id, its fields) of the live records
    recent: list[tuple[Any, Any]]  # (id, its fields); ids only (fields None) from a store keeping records for ever
    node_names: list[str]
    extra_outcomes: list[str]  # outcomes counted in the stats with no duration buckets read yet
    queue_names: list[str]
    queue_keys: list[str] = field(default_factory=list)


def _ask_first(pipe: Any, keep: float, horizon: float) -> None:
    fields_get = [exp_key("*") + "->" + f for f in DETAIL_FIELDS]
    for state in STATE_NAMES:
        pipe.zcard(state_index_key(state))
    for state in LIVE_STATES:
        pipe.sort(state_index_key(state), by="nosort", get=["#", *fields_get])
    if keep > 0:  # finished at t expires at t + keep: finished within the TTL = expiring after now - ttl + keep
        pipe.eval(lua("recent_finished"), 1, EXPIRING, horizon + keep, exp_key(""), *DETAIL_FIELDS)
    else:
        pipe.sort(state_index_key(FINISHED), by="nosort", get=["#", exp_key("*") + "->finished_at"])
    pipe.sort(state_index_key(State.queued.value), by="nosort",
              get=[exp_key("*") + "->target_node", exp_key("*") + "->created_at"])
    pipe.smembers(NODES)
    for name in STATS:
        pipe.hgetall(stats_key(name))
    for outcome in OUTCOMES:
        pipe.hgetall(duration_bucket_key(outcome))


def _take_first(res: Iterator[Any], snap: Snapshot, keep: float, horizon: float) -> _Pending:
    snap.states = {state: int(next(res)) for state in STATE_NAMES}
    details = [pair for _ in LIVE_STATES for pair in _records(next(res))]
    flat = next(res)
    recent = _records(flat) if keep > 0 else _finished_ids(flat, horizon)
    snap.queued = _queued(next(res), snap.now)
    node_names = sorted(as_text(n) for n in next(res))
    _take_counters(res, snap)
    return _Pending(horizon=horizon, details=details, recent=recent, node_names=node_names,
                    extra_outcomes=[o for o in snap.stats["outcomes"] if o not in snap.buckets],
                    queue_names=[DEFAULT_QUEUE, *(node_queue(n) for n in node_names)])


def _take_counters(res: Iterator[Any], snap: Snapshot) -> None:
    snap.stats = {name: _hash(next(res)) for name in STATS}
    snap.buckets = {o: _hash(next(res)) for o in OUTCOMES}


def _records(flat: list[Any]) -> list[tuple[Any, Any]]:
    """(id, its fields) from a SORT … GET # GET field… reply (or the recent_finished script's)."""
    width = len(DETAIL_FIELDS) + 1
    return [(flat[k], flat[k + 1: k + width]) for k in range(0, len(flat), width)]


def _finished_ids(flat: list[Any], horizon: float) -> list[tuple[Any, None]]:
    """The ids finished since `horizon`, from a SORT … GET # GET finished_at reply; their fields come later."""
    return [(i, None) for i, at in zip(flat[0::2], flat[1::2], strict=True) if (as_num(at) or 0.0) >= horizon]


def _queued(flat: list[Any], now: float) -> list[tuple[str, float]]:
    """(target node, created_at) of each queued experiment still there, from a SORT … GET reply."""
    return [(as_text(node), as_num(created) or now) for node, created in zip(flat[0::2], flat[1::2], strict=True)
            if created is not None]


def _ask_second(pipe: Any, pending: _Pending) -> None:
    for i, values in pending.recent:
        if values is None:
            pipe.hmget(exp_key(as_text(i)), *DETAIL_FIELDS)
    for n in pending.node_names:
        pipe.hgetall(node_key(n))
    for key in pending.queue_keys:
        pipe.llen(key)
        pipe.lrange(key, 0, QUEUE_HEAD_SCAN - 1)
    for o in pending.extra_outcomes:
        pipe.hgetall(duration_bucket_key(o))


def _take_second(res: Iterator[Any], snap: Snapshot, pending: _Pending,
                 cache: RowCache | None) -> list[tuple[int, list[str]]]:
    """Fills rows, experiments, nodes and the extra buckets; returns each queue's (length, head job ids)."""
    details = pending.details + _finished_recently(res, pending.recent, pending.horizon)
    _keep_rows(snap, details, cache)
    for n in pending.node_names:
        raw = next(res)
        snap.nodes[n] = _node_info(raw) if raw else None
    heads = [(int(next(res)), [as_text(j) for j in next(res)]) for _ in pending.queue_keys]
    for o in pending.extra_outcomes:
        snap.buckets[o] = _hash(next(res))
    return heads


def _finished_recently(res: Iterator[Any], recent: list[tuple[Any, Any]], horizon: float) -> list[tuple[Any, Any]]:
    """The recent ids whose record is still there, finished, and finished since `horizon`: the schedule is
    when the record expires, the record's own finish time decides (a record gone or not finished any more
    is left out). Fields not read yet are the next replies in `res`."""
    out = []
    for exp_id, values in recent:
        fields = next(res) if values is None else values
        if fields[0] in _FINISHED_VALUES and (as_num(fields[_FINISHED_AT]) or 0.0) >= horizon:
            out.append((exp_id, fields))
    return out


def _keep_rows(snap: Snapshot, details: list[tuple[Any, Any]], cache: RowCache | None) -> None:
    previous = cache.rows if cache is not None else {}
    kept: dict[Any, Row] = {}
    for exp_id, values in details:
        if values[0] is None or exp_id in kept:
            continue  # deleted meanwhile, or read twice (its state changed between two SORTs)
        row = kept[exp_id] = _row(exp_id, values, previous.get(exp_id))
        snap.rows.append(row)
        snap.experiments.append(row.rec)
    if cache is not None:
        cache.rows = kept  # experiments gone since the last scrape drop out


def _ask_third(pipe: Any, heads: list[tuple[int, list[str]]]) -> None:
    for _, job_ids in heads:
        for j in job_ids:
            pipe.hget(Job.key_for(j), "enqueued_at")


def _take_third(out: list[Any], snap: Snapshot, queue_names: list[str], heads: list[tuple[int, list[str]]]) -> None:
    pos = 0
    for name, (count, job_ids) in zip(queue_names, heads, strict=True):
        snap.queues[name] = (count, _oldest(out[pos: pos + len(job_ids)]))
        pos += len(job_ids)


def _oldest(replies: list[Any]) -> float | None:
    """The earliest enqueue time among a queue head's jobs (None: none known)."""
    known = [t for t in (_enqueued_at(v) for v in replies) if t is not None]
    return min(known) if known else None


def _node_info(raw: dict[bytes, bytes]) -> dict[str, Any]:
    info: dict[str, Any] = {}
    for k, v in raw.items():
        try:
            info[as_text(k)] = json.loads(v)
        except (json.JSONDecodeError, UnicodeDecodeError):
            info[as_text(k)] = as_text(v)
    return info


def _enqueued_at(raw: Any) -> float | None:
    if not raw:
        return None
    try:
        return utcparse(as_text(raw)).timestamp()
    except ValueError:
        return None


def run_times(rec: dict[str, Any]) -> tuple[float, float | None]:
    """(started, end): `end` is a finished run's finish time (its elapsed time is frozen), else None."""
    started = as_num(rec.get("started_at")) or 0.0
    end = (as_num(rec.get("finished_at")) or None) if rec.get("state") == FINISHED else None
    return started, end


def read_stages(store: Store, limit: int, fields: tuple[str, ...]) -> list[tuple[str, list[list[Any]]]]:
    """The newest `limit` stages, each with `fields` (raw replies, None when absent) of every member."""
    r = store.r
    names = [as_text(n) for n in r.zrevrange(STAGES, 0, max(0, limit - 1))]
    pipe = r.pipeline(transaction=False)
    for name in names:
        pipe.zrange(stage_key(name), 0, -1)
    members = pipe.execute() if names else []
    pipe = r.pipeline(transaction=False)
    for ids in members:
        for i in ids:
            pipe.hmget(exp_key(as_text(i)), *fields)
    rows = iter(pipe.execute() if any(members) else [])
    return [(name, [list(next(rows)) for _ in ids]) for name, ids in zip(names, members, strict=True)]
