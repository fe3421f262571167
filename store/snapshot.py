"""The /metrics read: everything one scrape needs from Redis, in three pipelined round trips.

What service/cluster_metrics.py turns into Prometheus families; the Redis reads live here, in the store layer
(`Store.snapshot`), so no module above it touches the client. The first pass over all experiments fetches
only `state` and `finished_at` (one SORT … GET); the fields the per-experiment gauges need are fetched only
for the experiments that get gauges. Each record's fields are decoded once and kept (`Row`, `RowCache`) until
they change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rq.job import Job
from rq.queue import Queue
from rq.utils import utcparse

from ajet_runner.statemachine.lifecycle import FINISHED, Outcome
from ajet_runner.store.keys import INDEX, NODES, STAGES, duration_bucket_key, exp_key, node_key, stage_key, stats_key
from ajet_runner.store.naming import DEFAULT_QUEUE, node_queue

if TYPE_CHECKING:
    from ajet_runner.store.store import Store

# How many job ids from the head of a queue are looked at for the oldest one: `at_front` jobs
# (adoptions, high priority) sit newest-first before the FIFO part, so the oldest job is at the
# boundary, which is near the head unless dozens of jobs were pushed to the front.
QUEUE_HEAD_SCAN = 32
BULK_DETAILS = 1000  # above this many experiments with gauges, their fields come from one SORT … GET
DETAIL_FIELDS = ("state", "purpose", "node", "started_at", "finished_at", "created_at",
                 "max_seconds", "attempt", "latest_metrics", "target_node", "nnodes")
STATS = ("transitions", "outcomes", "repairs", "advised", "duration_sum", "result_write_failures")


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
    experiments: list[dict[str, Any]] = field(default_factory=list)  # the ones that get gauges
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


def read_snapshot(store: Store, finished_ttl: float, now: float, cache: RowCache | None = None) -> Snapshot:  # noqa: C901 - one pass over every record builds every family
    """`cache`: the rows of the previous scrape, reused where a record's fields did not change
    (and replaced by this scrape's)."""
    r = store.r
    snap = Snapshot(now=now)
    outcomes = [o.value for o in Outcome]

    # 1: id, state and finish time of every experiment in one SORT (Redis walks the hashes in C:
    #    ~12 ms for 10,000, against ~200 ms for a pipeline of HMGETs parsed by redis-py), node names, counters.
    pipe = r.pipeline(transaction=False)
    pipe.sort(INDEX, by="nosort", get=["#", exp_key("*") + "->state", exp_key("*") + "->finished_at"])
    pipe.smembers(NODES)
    for name in STATS:
        pipe.hgetall(stats_key(name))
    for outcome in outcomes:
        pipe.hgetall(duration_bucket_key(outcome))
    flat, raw_nodes, *rest = pipe.execute()
    node_names = sorted(as_text(n) for n in raw_nodes)
    snap.stats = {name: _hash(raw) for name, raw in zip(STATS, rest[: len(STATS)], strict=True)}
    snap.buckets = {o: _hash(raw) for o, raw in zip(outcomes, rest[len(STATS):], strict=True)}
    extra_outcomes = [o for o in snap.stats["outcomes"] if o not in snap.buckets]
    queue_names = [DEFAULT_QUEUE, *(node_queue(n) for n in node_names)]
    queue_keys = [Queue(name, connection=r).key for name in queue_names]
    # Ids and states stay bytes here (10,000 decodes are ~10 ms): states are decoded once per name,
    # ids only for records that changed since the last scrape.
    counts: dict[Any, int] = {}
    ids_with_gauges: list[Any] = []
    horizon = now - finished_ttl
    finished = (FINISHED, FINISHED.encode())
    for exp_id, state, finished_at in zip(flat[0::3], flat[1::3], flat[2::3], strict=True):
        if state is None:
            continue  # an index entry whose hash is gone
        counts[state] = counts.get(state, 0) + 1
        if state not in finished or (as_num(finished_at) or 0.0) >= horizon:
            ids_with_gauges.append(exp_id)
    for state, count in counts.items():
        name = as_text(state)
        snap.states[name] = snap.states.get(name, 0) + count

    # 2: details of the experiments that get gauges, node hashes, queue lengths and heads. Many of them:
    #    one SORT … GET of every record's fields (Redis walks the hashes in C; packing and parsing
    #    thousands of HMGETs in redis-py cost ~300 ms at 10,000), filtered here; a few: their HMGETs.
    bulk = len(ids_with_gauges) > BULK_DETAILS
    pipe = r.pipeline(transaction=False)
    if bulk:
        pipe.sort(INDEX, by="nosort", get=["#", *(exp_key("*") + "->" + f for f in DETAIL_FIELDS)])
    else:
        for i in ids_with_gauges:
            pipe.hmget(exp_key(as_text(i)), *DETAIL_FIELDS)
    for n in node_names:
        pipe.hgetall(node_key(n))
    for key in queue_keys:
        pipe.llen(key)
        pipe.lrange(key, 0, QUEUE_HEAD_SCAN - 1)
    for o in extra_outcomes:
        pipe.hgetall(duration_bucket_key(o))
    res = pipe.execute()
    if bulk:
        width = len(DETAIL_FIELDS) + 1
        wanted = set(ids_with_gauges)
        rows = res[0]
        by_id = {rows[k]: rows[k + 1: k + width] for k in range(0, len(rows), width)}
        details = [(i, by_id[i]) for i in ids_with_gauges if i in by_id and i in wanted]
        res = [None, *res[1:]]
        first = 1
    else:
        details = list(zip(ids_with_gauges, res[: len(ids_with_gauges)], strict=True))
        first = len(ids_with_gauges)
    previous = cache.rows if cache is not None else {}
    kept: dict[Any, Row] = {}
    for exp_id, values in details:
        if values[0] is None:
            continue  # deleted between the two reads
        row = kept[exp_id] = _row(exp_id, values, previous.get(exp_id))
        snap.rows.append(row)
        snap.experiments.append(row.rec)
    if cache is not None:
        cache.rows = kept  # experiments gone since the last scrape drop out
    pos = first
    for n in node_names:
        snap.nodes[n] = _node_info(res[pos]) if res[pos] else None
        pos += 1
    heads = []
    for _ in queue_keys:
        heads.append((int(res[pos]), [as_text(j) for j in res[pos + 1]]))
        pos += 2
    for o in extra_outcomes:
        snap.buckets[o] = _hash(res[pos])
        pos += 1

    # 3: enqueue times of the jobs at the queue heads.
    pipe = r.pipeline(transaction=False)
    for _, job_ids in heads:
        for j in job_ids:
            pipe.hget(Job.key_for(j), "enqueued_at")
    res = pipe.execute()
    pos = 0
    for name, (count, job_ids) in zip(queue_names, heads, strict=True):
        times = [_enqueued_at(v) for v in res[pos: pos + len(job_ids)]]
        pos += len(job_ids)
        known = [t for t in times if t is not None]
        snap.queues[name] = (count, min(known) if known else None)
    return snap


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
