"""Cluster metrics for Prometheus, computed from Redis at scrape time.

One scrape target (the API) sees every experiment, queue and node, and nothing is lost when an
RQ work-horse exits: multiprocess mode would leave files per fork and grow the scrape forever
(docs/background.md#prometheus-multiprocess). The reads are pipelined — three round trips however many experiments there
are — and cost what the live experiments cost (store/cluster/snapshot.py): the counts per state are index sizes, and the
fields the per-experiment gauges need are fetched only for the experiments that get gauges (launched, unfinished
ones, and finished ones younger than `finished_metrics_ttl`); queued experiments are aggregates per target node
(`queued_families`), so label cardinality and scrape cost stay bounded on a store with years of finished runs
and thousands of queued ones. Each record's fields are decoded and its
series written once and kept (`Row`, per process) until its fields change: at 10,000 live
experiments a scrape where nothing changed costs the Redis reads and the elapsed times, not the
parsing and formatting of 100,000 series (bench/bench_metrics.py: cold / warm / churn), for ~5 KB
of memory per experiment with gauges (51 MB at 10,000).
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import math
import re
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ajet_runner.service.api.http_metrics import HTTP_REGISTRY
from ajet_runner.statemachine.absence import node_absent_for
from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.lifecycle import FINISHED, TRANSITIONS, Outcome, State
from ajet_runner.statemachine.metric_vocabulary import HEADLINE, HEADLINE_METRIC, STAGE_BEST_GAUGE
from ajet_runner.store.cluster.snapshot import ROWS, Row, Snapshot
from ajet_runner.store.cluster.snapshot import as_num as _num
from ajet_runner.store.cluster.snapshot import as_text as _text
from ajet_runner.store.cluster.snapshot import run_times as _run_times
from ajet_runner.store.cluster.stats import split_pair, split_transition, transition_label
from ajet_runner.store.settings import get_settings
from ajet_runner.store.store import DURATION_BUCKETS, NODE_ALIVE_SECONDS, Store

log = logging.getLogger(__name__)

PURPOSE_MAX_CHARS = 60  # `purpose` is free text (CJK, backticks): one line of at most this many characters


_MEMO_MAX = 4096
# The headline metrics' gauges (statemachine/metric_vocabulary.py): one value each, and the family with a `k` label.
_SINGLE = tuple(h for h in HEADLINE if not h.family)
_FAMILY = next((h for h in HEADLINE if h.family), None)
_GO: dict[float, str] = {}
_PASS_K: dict[str, str] = {}  # metric key -> its k in the headline family ("" when not one of it)


def _go(value: float) -> str:
    """floatToGoString, remembered for the values that recur (limits, attempts, 0.5, ...). Zero
    (0.0 == -0.0) and NaN are not remembered."""
    text = _GO.get(value)
    if text is None:
        text = floatToGoString(value)
        if value and value == value and len(_GO) < _MEMO_MAX:
            _GO[value] = text
    return text


_FIELD_TEXT: dict[tuple[str, float], str] = {}


def _field_text(raw: str, default: float) -> str:
    """`_go(_num(raw) or default)` for a record's numeric field, remembered by its stored text: limits,
    attempts and node counts repeat across experiments."""
    key = (raw, default)
    text = _FIELD_TEXT.get(key)
    if text is None:
        text = _go(_num(raw) or default)
        if len(_FIELD_TEXT) < _MEMO_MAX:
            _FIELD_TEXT[key] = text
    return text


def _pass_k(key: str) -> str:
    k = _PASS_K.get(key)
    if k is None:
        k = _FAMILY.k_of(key) if _FAMILY is not None else ""
        if len(_PASS_K) < _MEMO_MAX:
            _PASS_K[key] = k
    return k


def purpose_label(purpose: str) -> str:
    """One line, at most PURPOSE_MAX_CHARS characters: a label, not the blueprint's prose."""
    flat = " ".join(purpose.split())
    return flat if len(flat) <= PURPOSE_MAX_CHARS else flat[: PURPOSE_MAX_CHARS - 1] + "…"


def _elapsed_between(started: float, end: float | None, now: float) -> float:
    """Run time so far (frozen at finish); 0 for a run that never started."""
    return max(0.0, (end if end is not None else now) - started) if started else 0.0


def _elapsed(rec: dict[str, Any], now: float) -> float:
    return _elapsed_between(*_run_times(rec), now)


STAGES_EXPORTED = 200  # the newest stages get series: a scrape's cost stays bounded however many there were
STAGE_FIELDS = ("state", "outcome", "best_metrics", "latest_metrics")


def stage_families(store: Store, limit: int = STAGES_EXPORTED) -> Iterable[Metric]:
    """Per stage: experiments by state and by outcome, and the best headline metric any of them reached (the
    report's best of a finished one, the latest value of one still running). Stages whose records have
    all expired are left out."""
    experiments = GaugeMetricFamily("ajet_runner_stage_experiments", "Experiments of a stage per lifecycle state.",
                                    labels=["stage", "state"])
    outcomes = GaugeMetricFamily("ajet_runner_stage_outcomes", "Finished experiments of a stage per outcome.",
                                 labels=["stage", "outcome"])
    best = GaugeMetricFamily(STAGE_BEST_GAUGE, f"The best {HEADLINE_METRIC} any experiment of the stage reached.",
                             labels=["stage"])
    for name, rows in store.stage_snapshot(limit, STAGE_FIELDS):
        states, ends, top = _stage_tally(rows)
        if not states:
            continue
        for state in sorted(states):
            experiments.add_metric([name, state], states[state])
        for outcome in sorted(ends):
            outcomes.add_metric([name, outcome], ends[outcome])
        if top is not None:
            best.add_metric([name], top)
    return experiments, outcomes, best


def _stage_tally(rows: Iterable[Any]) -> tuple[dict[str, int], dict[str, int], float | None]:
    """A stage's experiments counted by state and by outcome (the expired left out), and the best headline
    value any of them reached."""
    states: dict[str, int] = {}
    ends: dict[str, int] = {}
    top: float | None = None
    for row in rows:
        state, outcome, best_raw, latest_raw = (_text(v) if v is not None else "" for v in row)
        if not state:
            continue  # expired
        states[state] = states.get(state, 0) + 1
        if state == FINISHED and outcome:
            ends[outcome] = ends.get(outcome, 0) + 1
        value = _stage_reward(best_raw, latest_raw)
        if value is not None and (top is None or value > top):
            top = value
    return states, ends, top


def _stage_reward(best_raw: str, latest_raw: str) -> float | None:
    try:
        best = json.loads(best_raw) if best_raw else {}
        latest = json.loads(latest_raw) if latest_raw else {}
    except json.JSONDecodeError:
        return None
    entry = best.get(HEADLINE_METRIC) if isinstance(best, dict) else None
    value = entry.get("value") if isinstance(entry, dict) else (latest.get(HEADLINE_METRIC)
                                                               if isinstance(latest, dict) else None)
    number = _num(value)
    return number if number is not None and math.isfinite(number) else None


def absent_node_family(snap: Snapshot, after: float) -> Metric:
    """Queued work for a node no live worker has served for `after` seconds (it would wait for ever)."""
    family = GaugeMetricFamily(
        "ajet_runner_queued_for_absent_node", "Queued experiments for a node that no live worker has served for "
        "longer than AJET_RUNNER_NODE_ABSENT_REPORT_SECONDS (0 per known node otherwise).", labels=["node"])
    counts = dict.fromkeys(snap.nodes, 0)
    for node, created_at in snap.queued:
        if not node:
            continue
        info = snap.nodes.get(node)
        seen = _num(info.get("last_seen")) if info else None
        gone = node_absent_for(snap.now, seen, created_at, NODE_ALIVE_SECONDS)
        counts.setdefault(node, 0)
        if gone is not None and gone >= after:
            counts[node] += 1
    for node, count in sorted(counts.items()):
        family.add_metric([node], count)
    return family


def queued_families(snap: Snapshot) -> Iterable[Metric]:
    """Queued experiments as aggregates per target node ("" = any node may take them): thousands can wait,
    so they get no per-experiment series (a scrape's cost follows the live experiments)."""
    count = GaugeMetricFamily("ajet_runner_queued_experiments", "Queued experiments per target node (node=\"\": "
                              "any node may take them).", labels=["node"])
    oldest = GaugeMetricFamily("ajet_runner_queued_oldest_age_seconds", "Seconds the oldest queued experiment of "
                               "a target node has waited since it was submitted.", labels=["node"])
    by_node: dict[str, tuple[int, float]] = {"": (0, snap.now)}
    for node, created_at in snap.queued:
        n, first = by_node.get(node, (0, snap.now))
        by_node[node] = (n + 1, min(first, created_at))
    for node, (n, first) in sorted(by_node.items()):
        count.add_metric([node], n)
        oldest.add_metric([node], max(0.0, snap.now - first) if n else 0.0)
    return count, oldest


def state_family(snap: Snapshot) -> Metric:
    """Experiments per lifecycle state: every state of the machine at 0 or more, then any other the store holds."""
    states = GaugeMetricFamily("ajet_runner_experiments", "Experiments per lifecycle state.", labels=["state"])
    for name in [s.value for s in State] + sorted(set(snap.states) - {s.value for s in State}):
        states.add_metric([name], snap.states.get(name, 0))
    return states


# The per-experiment gauges (labels experiment, node; `_experiment_lines` writes their series), in the order
# they are written. `purpose` rides on the info series alone: dashboards join it in (`* on (experiment)
# group_left (purpose)`), so a long label value is stored once and not on every gauge.
EXPERIMENT_GAUGES = (
    ("ajet_runner_experiment_info", "1 per experiment, with its descriptive labels (purpose) for joins."),
    ("ajet_runner_experiment_elapsed_seconds",
     "Seconds since the run started (frozen when it finished; 0 before it starts)."),
    ("ajet_runner_experiment_max_seconds", "The blueprint's time limit in seconds (0 = none)."),
    *((h.gauge, f"{h.name} of the latest evaluation.") for h in HEADLINE),
    ("ajet_runner_experiment_val_step", "Training step of the latest evaluation."),
    ("ajet_runner_experiment_state", "1 for the experiment's current lifecycle state."),
    ("ajet_runner_experiment_attempt", "Launch attempt number (a repair starts a new one)."),
    ("ajet_runner_experiment_nodes", "Nodes the run spans (nnodes; node = the head's for a multi-node run, which "
     "is one experiment, not one per node)."),
)


def _all_transitions() -> list[str]:
    """Every edge of the lifecycle, so each counter exists at 0 before its first increase."""
    pairs = []
    for t in TRANSITIONS:
        sources = t["source"] if isinstance(t["source"], list) else [t["source"]]
        pairs += [transition_label(State(s).value, State(t["dest"]).value) for s in sources]
    return pairs


def counter_families(snap: Snapshot) -> Iterable[Metric]:
    # CounterMetricFamily appends `_total` in the exposition: the names here go without it.
    transitions = CounterMetricFamily("ajet_runner_transitions", "Lifecycle transitions.",
                                      labels=["from_state", "to_state"])
    counts = snap.stats.get("transitions", {})
    for pair in dict.fromkeys([*_all_transitions(), *sorted(counts)]):
        transitions.add_metric(list(split_transition(pair)), counts.get(pair, 0.0))
    yield transitions

    repairs = CounterMetricFamily("ajet_runner_repairs", "Repairs by failure signature and result.",
                                  labels=["signature", "result"])
    for key, value in sorted(snap.stats.get("repairs", {}).items()):
        repairs.add_metric(list(split_pair(key)), value)
    yield repairs

    advised = CounterMetricFamily("ajet_runner_advised_repairs",
                                  "LLM adviser answers by model and result (advised and relaunched, refused, "
                                  "declined, no answer; then <outcome> once the relaunched run finished).",
                                  labels=["model", "result"])
    for key, value in sorted(snap.stats.get("advised", {}).items()):
        advised.add_metric(list(split_pair(key)), value)
    yield advised

    write_failures = CounterMetricFamily(
        "ajet_runner_result_write_failures", "Experiments whose result files (finish.flag) could not be written, "
        "by errno (ENOSPC: full disk; EACCES: outside the allowed roots or not writable).", labels=["errno"])
    failed_writes = snap.stats.get("result_write_failures", {})
    for code in dict.fromkeys(["ENOSPC", "EACCES", *sorted(failed_writes)]):  # both exist at 0 from the start
        write_failures.add_metric([code], failed_writes.get(code, 0.0))
    yield write_failures

    outcomes = CounterMetricFamily("ajet_runner_outcomes", "Finished experiments by outcome.", labels=["outcome"])
    done = snap.stats.get("outcomes", {})
    names = list(dict.fromkeys([*(o.value for o in Outcome), *sorted(done)]))
    for outcome in names:
        outcomes.add_metric([outcome], done.get(outcome, 0.0))
    yield outcomes

    duration = HistogramMetricFamily("ajet_runner_run_duration_seconds",
                                     "Run time from start to finish, by outcome.", labels=["outcome"])
    sums = snap.stats.get("duration_sum", {})
    for outcome in names:
        stored = snap.buckets.get(outcome, {})
        buckets = []
        for b in DURATION_BUCKETS:
            key = "inf" if math.isinf(b) else repr(b)
            buckets.append((floatToGoString(b), stored.get(key, 0.0)))
        duration.add_metric([outcome], buckets, sum_value=sums.get(outcome, 0.0))
    yield duration


def queue_families(snap: Snapshot) -> Iterable[Metric]:
    jobs = GaugeMetricFamily("ajet_runner_queue_jobs", "Jobs waiting in an RQ queue.", labels=["queue"])
    age = GaugeMetricFamily("ajet_runner_queue_oldest_job_age_seconds",
                            "Age of the oldest waiting job (0 when the queue is empty).", labels=["queue"])
    for name, (count, oldest) in snap.queues.items():
        jobs.add_metric([name], count)
        age.add_metric([name], max(0.0, snap.now - oldest) if oldest is not None and count else 0.0)
    yield jobs
    yield age


def node_families(snap: Snapshot) -> Iterable[Metric]:
    up = GaugeMetricFamily("ajet_runner_node_up",
                           f"1 when the node's heartbeat is newer than {format_limit(NODE_ALIVE_SECONDS)}.",
                           labels=["node"])
    age = GaugeMetricFamily("ajet_runner_node_heartbeat_age_seconds", "Seconds since the node's last heartbeat.",
                            labels=["node"])
    gpus = GaugeMetricFamily("ajet_runner_node_gpus", "GPUs of a node: total, busy (held by experiments), free.",
                             labels=["node", "state"])
    executor = GaugeMetricFamily("ajet_runner_node_executor_info", "1 for the executor a node's runs go to "
                                 "(local, ssh, slurm).", labels=["node", "executor"])
    for name, info in snap.nodes.items():
        if info is None:  # the heartbeat hash expired: a node we knew is gone
            up.add_metric([name], 0)
            continue
        executor.add_metric([name, str(info.get("executor") or "local")], 1)
        seen = _num(info.get("last_seen")) or 0.0
        up.add_metric([name], 1 if snap.now - seen < NODE_ALIVE_SECONDS else 0)
        age.add_metric([name], max(0.0, snap.now - seen))
        total = _num(info.get("gpus")) or 0.0
        busy = _num(info.get("gpus_busy")) or 0.0
        gpus.add_metric([name, "total"], total)
        gpus.add_metric([name, "busy"], busy)
        gpus.add_metric([name, "free"], max(0.0, total - busy))
    yield from (up, age, gpus, executor)


def _http_registry() -> Any:
    """The API process's request-latency (and process_*) registry."""
    return HTTP_REGISTRY


class WithoutCreated(Collector):
    """A registry's families minus their `_created` samples: in the text format those become series of
    their own (`…_created`), names nobody queries and that metric_names.py does not list."""

    def __init__(self, registry: Collector) -> None:
        self.registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            family.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield family


_NEEDS_ESCAPE = re.compile(r'[\\\n"]')


def _escape_label(value: str) -> str:
    if _NEEDS_ESCAPE.search(value) is None:  # ids, node names, most purposes
        return value
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(doc: str) -> str:
    return doc.replace("\\", "\\\\").replace("\n", "\\n")


def _experiment_lines(rec: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """The experiment's series lines but the elapsed one, (family, line) in family order; first
    ("", its escaped `experiment`/`node` labels), which the elapsed line is written with."""
    eid, node = f'experiment="{_escape_label(rec["id"])}"', f'node="{_escape_label(rec.get("node") or "")}"'
    exp = f"{eid},{node}"  # labels go out sorted by name, as generate_latest writes them
    purpose = _escape_label(purpose_label(rec.get("purpose") or ""))
    out = [("", exp),
           ("ajet_runner_experiment_info", f'ajet_runner_experiment_info{{{exp},purpose="{purpose}"}} 1.0'),
           ("ajet_runner_experiment_max_seconds",
            f"ajet_runner_experiment_max_seconds{{{exp}}} {_field_text(rec.get('max_seconds') or '', 0.0)}"),
           ("ajet_runner_experiment_state",
            f'ajet_runner_experiment_state{{{exp},state="{_escape_label(rec.get("state") or "")}"}} 1.0'),
           ("ajet_runner_experiment_attempt",
            f"ajet_runner_experiment_attempt{{{exp}}} {_field_text(rec.get('attempt') or '', 0.0)}"),
           ("ajet_runner_experiment_nodes",
            f"ajet_runner_experiment_nodes{{{exp}}} {_field_text(rec.get('nnodes') or '', 1.0)}")]
    metrics = rec.get("latest_metrics") or {}
    if isinstance(metrics, dict):
        out += _metric_lines(metrics, exp, eid, node)
    return tuple(out)


def _metric_lines(metrics: dict[str, Any], exp: str, eid: str, node: str) -> list[tuple[str, str]]:
    """The latest metrics' series: each single headline, the step they were evaluated at, and the pass@k
    family (one series per k, labelled with it)."""
    go = _go
    out = [(headline.gauge, f"{headline.gauge}{{{exp}}} {go(value)}") for headline in _SINGLE
           if (value := _num(metrics.get(headline.name))) is not None]
    if (value := _num(metrics.get("step"))) is not None:
        out.append(("ajet_runner_experiment_val_step", f"ajet_runner_experiment_val_step{{{exp}}} {go(value)}"))
    if (family := _FAMILY) is not None:
        for key, raw in sorted(metrics.items()):
            k = _pass_k(key) if isinstance(key, str) else ""
            if k and (value := _num(raw)) is not None:
                out.append((family.gauge, f'{family.gauge}{{{eid},k="{k}",{node}}} {go(value)}'))
    return out


def experiment_text(snap: Snapshot) -> str:
    """The per-experiment gauges (EXPERIMENT_GAUGES) in the text format 0.0.4, written directly: the one way
    they are rendered. At 10,000 live experiments (100,000 series) building prometheus_client Metric/Sample
    objects for them took ~6x as long as this text (bench/bench_metrics.py): each experiment's series are
    formatted once and kept in its row until its fields change, and its labels are escaped once."""
    lines: dict[str, list[str]] = {name: [] for name, _ in EXPERIMENT_GAUGES}
    go = floatToGoString
    elapsed = lines["ajet_runner_experiment_elapsed_seconds"]
    rows = snap.rows
    for i, rec in enumerate(snap.experiments):
        row = rows[i] if i < len(rows) else None
        if row is None or row.rec is not rec:  # a snapshot made without rows (tests)
            started, end = _run_times(rec)
            row = Row(raw=(), rec=rec, started=started, end=end)
        if row.lines is None:
            row.lines = _experiment_lines(rec)
        exp = row.lines[0][1]
        for name, text in row.lines[1:]:
            lines[name].append(text)
        seconds = _elapsed_between(row.started, row.end, snap.now)
        elapsed.append(f"ajet_runner_experiment_elapsed_seconds{{{exp}}} {go(seconds)}")
    out: list[str] = []
    for name, doc in EXPERIMENT_GAUGES:
        out.append(f"# HELP {name} {_escape_help(doc)}\n# TYPE {name} gauge\n")
        if lines[name]:
            out.append("\n".join(lines[name]) + "\n")
    return "".join(out)


class _One(Collector):
    def __init__(self, *families: Metric) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def warm_up(store: Store) -> None:
    """Fill the row cache before the first scrape comes (the API starts it on a thread): at 10,000 live
    experiments a scrape that decodes and formats every record costs ~3x one that finds them cached.
    Quiet when Redis is not there yet: the first scrape then pays, as it would have."""
    try:
        metrics_response(store)
    except Exception as exc:  # noqa: BLE001 - a warm-up that fails costs nothing but the warm-up
        log.debug("metrics warm-up skipped: %s", exc)


_ONE_SCRAPE = threading.Lock()


@contextlib.contextmanager
def _one_scrape() -> Iterator[None]:
    """One scrape at a time: a second (an HA Prometheus pair, a scrape racing the start's warm-up) waits
    instead of decoding the same rows beside it. The cyclic GC pauses meanwhile: a scrape
    that decodes 10,000 records allocates ~500,000 objects, none in cycles, and the collections they
    trigger were a fifth of its time."""
    with _ONE_SCRAPE:
        collecting = gc.isenabled()
        gc.disable()
        try:
            yield
        finally:
            if collecting:
                gc.enable()


# (the store's Redis client's identity, monotonic time it was done, body) of the last scrape
_LAST: list[tuple[Any, float, bytes]] = [(None, 0.0, b"")]


def metrics_response(store: Store) -> tuple[bytes, str]:
    """The /metrics body (Prometheus text format 0.0.4) and its content type. A scrape that had to wait
    for another one of the same store (or for the start's warm-up) answers with the body that one made
    meanwhile: read at most one scrape's time before it came, as fresh as a monitoring answer needs."""
    arrived = time.monotonic()
    with _one_scrape():
        client, done_at, body = _LAST[0]
        if client == store.redis_id and done_at > arrived:
            return body, CONTENT_TYPE_PLAIN_0_0_4
        body, content_type = _metrics_response(store)
        _LAST[0] = (store.redis_id, time.monotonic(), body)
        return body, content_type


def cluster_text(store: Store, *, finished_ttl: float | None = None, now: float | None = None,
                 absent_after: float | None = None) -> bytes:
    """Every `API_METRICS` family but the HTTP histogram, from one Redis snapshot: the per-experiment gauges
    as text (experiment_text), the aggregate families (a handful of series each) through prometheus_client."""
    settings = get_settings()
    ttl = settings.finished_metrics_ttl if finished_ttl is None else finished_ttl
    after = settings.node_absent_report_seconds if absent_after is None else absent_after
    snap = store.snapshot(ttl, time.time() if now is None else now, ROWS)
    body = generate_latest(_One(state_family(snap)))
    body += experiment_text(snap).encode()
    body += generate_latest(_One(*counter_families(snap), *queue_families(snap), *queued_families(snap),
                                 *node_families(snap), absent_node_family(snap, after), *stage_families(store)))
    return body


def _metrics_response(store: Store) -> tuple[bytes, str]:
    body = cluster_text(store)
    registry = _http_registry()
    if registry is not None:
        body += generate_latest(WithoutCreated(registry))
    return body, CONTENT_TYPE_PLAIN_0_0_4
