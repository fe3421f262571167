"""A worker's own Prometheus endpoint: watch-loop latency, log bytes, stall signal, heartbeat, CPU, memory.

The watch loops run as threads of the node's watcher process (workers/node/watcher.py), which the
supervisor restarts when it dies; the supervisor serves the node's endpoint. So one
`WatchReporter` per watcher batches the numbers and flushes them at scrape granularity (the
first pass at once, then every FLUSH_SECONDS: a Prometheus scrape is every 15 s or more, so
flushing each second cost ~12 Redis commands/s per run for nothing) into this node's keys in
Redis; the supervisor serves them at scrape time.

Redis keys (all under `ajet:wm:<node>:`):
- `watch`: hash, one field per histogram bucket upper bound (non-cumulative counts), `sum`, `count`;
- `exps`: zset experiment -> time of its last flush (the index the collector reads);
- `exp:<id>`: hash `log_bytes` (running total), `age` (seconds without output at `at`), `at`;
  expires EXP_TTL_SECONDS after the last flush, so finished experiments leave the endpoint.

Process CPU and memory (`ajet_runner_worker_tree_*`) cover the supervisor's whole process tree (the
supervisor and its watcher): one process alone would hide where the watching happens. The
training runs live in tmux, outside that tree, and are not counted.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import psutil
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from ajet_runner.store.cluster.watch_metrics import WatchFlusher, read_watch
from ajet_runner.store.keys import watch_exp_key, watch_exps_key, watch_metrics_key
from ajet_runner.store.store import RedisError, Store

if TYPE_CHECKING:
    from ajet_runner.workers.node.supervisor import NodeSupervisor

log = logging.getLogger(__name__)

WATCH_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, math.inf)
FLUSH_SECONDS = 15.0
EXP_TTL_SECONDS = 60
NODE_TTL_SECONDS = 7 * 86400
REPORTER_TIMEOUT_SECONDS = 2.0
# /healthz fails when the supervisor's loop has not ticked for this long (it ticks every 0.5 s,
# and survives a Redis outage, whose calls can each block for the client's 10 s timeout).
HEALTH_STALE_SECONDS = 120.0


watch_key = watch_metrics_key
exps_key = watch_exps_key
exp_metrics_key = watch_exp_key


_BUCKET_NAMES = tuple((b, floatToGoString(b)) for b in WATCH_BUCKETS)  # formatted once, not every tick


def _bucket_of(seconds: float) -> str:
    return next(name for b, name in _BUCKET_NAMES if seconds <= b)


class WatchReporter:
    """The driver's `on_watch`: accumulate in memory, flush to Redis every FLUSH_SECONDS."""

    def __init__(self, store: Store, node: str, clock: Callable[[], float] = time.time) -> None:
        self.node = node
        self.clock = clock
        self._flush_script = WatchFlusher(store, REPORTER_TIMEOUT_SECONDS)
        self._last_flush = -math.inf
        self._buckets: dict[str, int] = {}
        self._sum = 0.0
        self._count = 0
        self._bytes: dict[str, int] = {}
        self._age: dict[str, tuple[float, float]] = {}  # exp -> (age, observed at)
        self.errors = 0
        self._lock = threading.RLock()  # one reporter serves every driver thread of a watcher process

    def __call__(self, exp_id: str, loop_seconds: float, new_log_bytes: int, last_output_age: float) -> None:
        with self._lock:
            self._observe(exp_id, loop_seconds, new_log_bytes, last_output_age)

    def _observe(self, exp_id: str, loop_seconds: float, new_log_bytes: int, last_output_age: float) -> None:
        try:
            now = self.clock()
            le = _bucket_of(max(0.0, loop_seconds))
            self._buckets[le] = self._buckets.get(le, 0) + 1
            self._sum += loop_seconds
            self._count += 1
            self._bytes[exp_id] = self._bytes.get(exp_id, 0) + max(0, int(new_log_bytes))
            self._age[exp_id] = (max(0.0, float(last_output_age)), now)
            if now - self._last_flush >= FLUSH_SECONDS:
                self.flush()
        except Exception as exc:  # noqa: BLE001 - never break the watch loop for a metric
            self.errors += 1
            if self.errors in (1, 10, 100) or self.errors % 1000 == 0:
                log.warning("watch metrics not reported (%d errors so far): %s", self.errors, exc)

    def close(self) -> None:
        """Flush what the last passes left in memory; for the end of a job. Never raises."""
        try:
            self.flush()
        except Exception as exc:  # noqa: BLE001 - a failed flush is counted, never raised
            self.errors += 1
            log.warning("watch metrics: flush failed: %s", exc)

    def flush(self) -> None:
        """One script call with everything since the last flush. A failed batch is dropped, not retried:
        after a connection error we cannot know whether it landed, and counting twice is worse."""
        with self._lock:
            self._flush()

    def _flush(self) -> None:
        now = self.clock()
        self._last_flush = now
        buckets, total, count, sizes, ages = self._buckets, self._sum, self._count, self._bytes, self._age
        self._buckets, self._sum, self._count, self._bytes, self._age = {}, 0.0, 0, {}, {}
        if not count and not ages:
            return
        exps = list(ages.items())
        args: list[object] = [NODE_TTL_SECONDS, EXP_TTL_SECONDS, repr(total) if count else "", count, len(buckets)]
        for le, n in buckets.items():
            args += [le, n]
        for exp_id, (age, at) in exps:
            args += [exp_id, sizes.get(exp_id, 0), repr(age), repr(at)]
        self._flush_script(keys=[watch_key(self.node), exps_key(self.node),
                                 *(exp_metrics_key(self.node, exp_id) for exp_id, _ in exps)], args=args)


def _num(value: Any) -> float | None:
    try:
        return float(value.decode() if isinstance(value, bytes) else value)
    except (TypeError, ValueError, AttributeError):
        return None


class WorkerCollector(Collector):
    """This node's watch metrics (from Redis, written by its watcher) and its running experiments."""

    def __init__(self, store: Store, node: str, running: Callable[[], list[str]],
                 clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.node = node
        self.running = running
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        running = GaugeMetricFamily("ajet_runner_worker_running_experiments",
                                    "Unfinished experiments this node drives.", labels=["node"])
        running.add_metric([self.node], len(self.running()))
        yield running
        try:
            yield from self._from_redis()
        except RedisError as exc:
            log.warning("worker metrics: redis unreachable: %s", exc)

    def _from_redis(self) -> Iterator[Metric]:
        now = self.clock()
        raw_watch, exps, last_seen, per_exp = read_watch(self.store, self.node, now - EXP_TTL_SECONDS)

        watch = {k.decode(): _num(v) or 0.0 for k, v in raw_watch.items()}
        hist = HistogramMetricFamily("ajet_runner_worker_watch_loop_seconds",
                                     "Duration of one observation pass of the watch loop.")
        cumulative, buckets = 0.0, []
        for b in WATCH_BUCKETS:
            cumulative += watch.get(floatToGoString(b), 0.0)
            buckets.append((floatToGoString(b), cumulative))
        hist.add_metric([], buckets, sum_value=watch.get("sum", 0.0))
        yield hist

        log_bytes = CounterMetricFamily("ajet_runner_worker_log_bytes", "Log bytes read per experiment.",
                                        labels=["experiment"])
        age = GaugeMetricFamily("ajet_runner_worker_last_output_age_seconds",
                                "Seconds since the experiment last wrote to its log (the stall signal).",
                                labels=["experiment"])
        for exp_id, (size, last_age, at) in zip(exps, per_exp, strict=True):
            if at is None:  # expired between the two reads
                continue
            log_bytes.add_metric([exp_id], _num(size) or 0.0)
            age.add_metric([exp_id], (_num(last_age) or 0.0) + max(0.0, now - (_num(at) or now)))
        yield log_bytes
        yield age

        beat = GaugeMetricFamily("ajet_runner_worker_heartbeat_timestamp_seconds",
                                 "Unix time of the node's last heartbeat in Redis.", labels=["node"])
        if (seen := _num(last_seen)) is not None:
            beat.add_metric([self.node], seen)
        yield beat


class ProcessTreeCollector(Collector):
    """ajet_runner_worker_tree_cpu_seconds_total and ..._tree_resident_memory_bytes, summed over a process tree.

    Not the standard `process_*` names: those mean one process (the API exports its own), and a sum over
    a tree under the same name would mislead every query that mixes the two.

    CPU counts each live process's own time plus the time of the children it has reaped (Linux
    folds those into the reaper's `children_*`), so a restarted watcher's CPU stays counted after it exits.
    """

    def __init__(self, root_pid: int) -> None:
        self.root = psutil.Process(root_pid)

    def collect(self) -> Iterator[Metric]:
        cpu = rss = 0.0
        try:
            procs = [self.root, *self.root.children(recursive=True)]
        except psutil.Error:
            procs = []
        for proc in procs:
            try:
                with proc.oneshot():
                    t = proc.cpu_times()
                    cpu += t.user + t.system + t.children_user + t.children_system
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
        yield CounterMetricFamily("ajet_runner_worker_tree_cpu_seconds",
                                  "CPU seconds of the worker's process tree (supervisor, watcher).",
                                  value=cpu)
        yield GaugeMetricFamily("ajet_runner_worker_tree_resident_memory_bytes",
                                "Resident memory of the worker's process tree.", value=rss)


class _Handler(BaseHTTPRequestHandler):
    registry: CollectorRegistry
    healthy: Callable[[], bool]

    def do_GET(self) -> None:  # http.server's name
        path = urlsplit(self.path).path
        if path == "/healthz":
            ok = type(self).healthy()
            self._send(200 if ok else 503, b"ok\n" if ok else b"supervisor loop stalled\n", "text/plain")
        elif path in ("/metrics", "/"):
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            try:
                body = encoder(type(self).registry)
            except Exception as exc:  # a broken collector must not kill the server thread
                log.exception("worker metrics scrape failed")
                self._send(500, f"scrape failed: {exc}\n".encode(), "text/plain")
                return
            self._send(200, body, content_type)
        else:
            self._send(404, b"not found\n", "text/plain")

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
        log.debug("metrics http: " + format, *args)


def worker_registry(store: Store, node: str, running: Callable[[], list[str]], root_pid: int) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(WorkerCollector(store, node, running))
    registry.register(ProcessTreeCollector(root_pid))
    return registry


def serve_worker_metrics(sup: NodeSupervisor, port: int, addr: str = "0.0.0.0") -> ThreadingHTTPServer:
    """Serve /metrics and /healthz for this node's supervisor on `port` (in a daemon thread)."""
    last_tick = [time.monotonic()]
    previous = sup.on_tick

    def on_tick(s: NodeSupervisor) -> None:
        last_tick[0] = time.monotonic()
        if previous is not None:
            previous(s)

    sup.on_tick = on_tick
    handler = type("WorkerMetricsHandler", (_Handler,), {
        "registry": worker_registry(sup.store, sup.node.name, lambda: list(sup.running), os.getpid()),
        "healthy": staticmethod(lambda: time.monotonic() - last_tick[0] < HEALTH_STALE_SECONDS),
    })
    server = ThreadingHTTPServer((addr, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="worker-metrics", daemon=True).start()
    log.info("worker metrics on http://%s:%d/metrics", addr, server.server_address[1])
    return server
