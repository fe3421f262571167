"""A capacity table for one Redis and one API: simulated nodes, drivers and a queue write what real ones write.

Per size (nodes x running runs per node x queued experiments), on a fresh Redis, through the real code:
- node scan: the real `NodeSupervisor.adopt_orphans` of every node, back to back, while another node
  holds the queue-check lease (what all nodes but one do every 3 s): Redis CPU, commands and bytes
  per scan — the "O(own work)" figure, to compare across queue sizes;
- queue check: the lease holder's `QueueChecker.check` (once per cluster every 3 s), per check;
- then, each for `seconds` on its real schedule: the nodes (the supervisor loop: drain look every
  0.5 s, heartbeat every 2 s, scan every 3 s, a real election), the drivers (per run: poll every 2 s,
  5 log lines every 1 s, watch metrics every 15 s), the API (a real `ajet-runner serve` asked
  `?state=running`, `?state=queued` lists and `/metrics`), and all of them at once: Redis CPU (% of a
  core, INFO used_cpu_user+sys), commands/s and kB/s in+out (INFO stats), the API's p95. Each figure
  is less Redis' idle floor, measured just before once Redis is quiet (the API warms its rows after
  new records are written: its reads would otherwise count as the scan's).

Queued experiments are real RQ drive jobs waiting in their queues (a tenth for a live node's queue).

    python bench/bench_scale.py [--quick] [--seconds S] [--nodes 10,50,100] [--runs 8] [--queued 0,500,2000,10000]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import redis
from redis.client import Pipeline

from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.store.keys import INDEX, exp_key, gpu_key
from ajet_runner.store.lease import ClusterLease
from ajet_runner.store.per_experiment.queue import DEFAULT_QUEUE, drive_job_id, node_queue
from ajet_runner.store.per_experiment.record_store import encode
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from ajet_runner.workers.identity.this_node import NodeInfo
from ajet_runner.workers.node.queue_check import LEASE_NAME
from ajet_runner.workers.node.supervisor import ADOPT_SCAN_SECONDS, HEARTBEAT_SECONDS, NodeSupervisor
from ajet_runner.workers.node.worker_metrics import WatchReporter
from bench.bench_api import TOKEN, free_port

with suppress(OSError):
    os.nice(10)

LINE = "(TaskRunner pid=1) INFO rollout: task 000042 finished with reward 1.0 in 12 turns"
BLUEPRINT = "x" * 3000
ENDPOINTS = (("running", "/v1/experiments?state=running&limit=100"),
             ("queued", "/v1/experiments?state=queued&limit=100"), ("metrics", "/metrics"))


# -- Redis counters ------------------------------------------------------------------------------
@dataclass
class Cost:
    """Redis' own CPU seconds, commands and bytes in+out over an interval."""
    cpu: float = 0.0
    commands: float = 0.0
    bytes: float = 0.0

    @staticmethod
    def now(r: redis.Redis) -> Cost:
        info = r.info()
        return Cost(float(info["used_cpu_user"]) + float(info["used_cpu_sys"]),
                    float(info["total_commands_processed"]),
                    float(info["total_net_input_bytes"]) + float(info["total_net_output_bytes"]))

    def __sub__(self, o: Cost) -> Cost:
        return Cost(self.cpu - o.cpu, self.commands - o.commands, self.bytes - o.bytes)

    def per(self, n: float) -> Cost:
        return Cost(self.cpu / n, self.commands / n, self.bytes / n)

    def scaled(self, k: float) -> Cost:
        return Cost(self.cpu * k, self.commands * k, self.bytes * k)


@contextmanager
def measured(r: redis.Redis, out: list[Cost]) -> Iterator[None]:
    """The interval's cost less Redis' idle floor over as long (the API's own background reads — it warms
    its rows after new records — once they have settled: see `quiet`)."""
    floor = quiet(r)
    before, t0 = Cost.now(r), time.monotonic()
    yield
    spent = Cost.now(r) - before
    out.append(spent - floor.scaled(time.monotonic() - t0))


def quiet(r: redis.Redis, deadline: float = 120.0) -> Cost:
    """Wait until Redis is idle (< 10 commands in 1 s: the API done warming up), then its idle cost per s."""
    limit = time.monotonic() + deadline
    while time.monotonic() < limit:
        a = Cost.now(r)
        time.sleep(1.0)
        if (Cost.now(r) - a).commands < 10:
            break
    a = Cost.now(r)
    time.sleep(1.0)
    return Cost.now(r) - a


# -- the simulated cluster -----------------------------------------------------------------------
def _bulk(store: Store, items: range, write: Callable[[Pipeline, int, float], None]) -> None:
    """Records written as `Records.create` and `Records.transition` write them (the same commands, the real
    transition script), 250 to a MULTI: a create per round trip took ~25 ms each on a busy 2-core box."""
    for lo in range(items.start, items.stop, 250):
        pipe = store.r.pipeline(transaction=True)
        pipe.multi()
        for k in range(lo, min(items.stop, lo + 250)):
            write(pipe, k, time.time())
        pipe.execute()


def _create(store: Store, pipe: Pipeline, exp_id: str, fields: dict[str, Any], now: float) -> None:
    record = {"id": exp_id, "version": 0, "created_at": now, "state": "queued", **fields}
    pipe.hset(exp_key(exp_id), mapping=dict(zip(*[iter(encode(record))] * 2, strict=True)))
    pipe.zadd(INDEX, {exp_id: now})
    keys, args = store.records._transition_call(exp_id, expected_version=0, fields={}, event={"type": "submitted"},
                                                node=str(fields.get("target_node") or ""))
    store.records._transition(keys=keys, args=args, client=pipe)


def add_running(store: Store, nodes: int, runs: int) -> None:
    def write(pipe: Pipeline, k: int, now: float) -> None:
        n, exp_id = k // runs, f"n{k // runs}r{k % runs}"
        _create(store, pipe, exp_id, {"blueprint": BLUEPRINT}, now)
        keys, args = store.records._transition_call(exp_id, expected_version=None, event={"type": "transition"},
                                                    node=f"node{n}",
                                                    fields={"state": "running", "node": f"node{n}", "owner": f"o{n}",
                                                            "lease_until": now + 3600})
        store.records._transition(keys=keys, args=args, client=pipe)
        store.slots._reserve(keys=[gpu_key(f"node{n}")], args=[exp_id, 1, 8], client=pipe)
    _bulk(store, range(nodes * runs), write)


def add_queued(store: Store, start: int, stop: int, nodes: int) -> None:
    """Queued experiments `start`..`stop`, each with its drive job waiting in its RQ queue."""
    def write(pipe: Pipeline, k: int, now: float) -> None:
        exp_id, job_id = f"q{k}", drive_job_id(f"q{k}")
        target = f"node{k % nodes}" if k % 10 == 0 else ""
        queue = node_queue(target) if target else DEFAULT_QUEUE
        _create(store, pipe, exp_id, {"blueprint": BLUEPRINT, "job_id": job_id, "queue": queue,
                                      "target_node": target}, now)
        store.jobs.enqueue_drive(exp_id, queue, job_id=job_id, pipeline=pipe)
    _bulk(store, range(start, stop), write)


def supervisors(url: str, nodes: int, runs: int) -> list[NodeSupervisor]:
    settings = Settings(redis_url=url)
    return [NodeSupervisor(settings, NodeInfo(name=f"node{n}", gpus=8, slots=runs), url) for n in range(nodes)]


def node_loop(sup: NodeSupervisor, offset: float, stop: threading.Event) -> None:
    """The supervisor's loop (NodeSupervisor.run) without its watcher process."""
    t0 = time.monotonic() + offset
    due = {"drain": t0, "beat": t0, "scan": t0}
    every = {"drain": 0.5, "beat": HEARTBEAT_SECONDS, "scan": ADOPT_SCAN_SECONDS}
    while not stop.is_set():
        now = time.monotonic()
        for key, at in due.items():
            if now >= at:
                if key == "drain":
                    sup.store.nodes.draining(sup.node.name)
                elif key == "beat":
                    sup.heartbeat()
                else:
                    sup.adopt_orphans()
                due[key] = at + every[key]
        stop.wait(max(0.0, min(due.values()) - time.monotonic()))


def driver_loop(url: str, n: int, runs: int, stop: threading.Event) -> None:
    """The steady traffic of node `n`'s drivers: lease/cancel poll, log lines, watch metrics."""
    store = Store(redis.Redis.from_url(url), retention_seconds=0)
    reporter = WatchReporter(store, f"node{n}")
    t0 = time.monotonic()
    due = {}
    for k in range(runs):
        due[f"poll{k}"] = t0 + (k * 0.37 + n * 0.11) % 2
        due[f"tail{k}"] = t0 + (k * 0.13 + n * 0.07) % 1
    while not stop.is_set():
        now = time.monotonic()
        for key, at in list(due.items()):
            if now < at:
                continue
            exp_id = f"n{n}r{key[4:]}"
            if key.startswith("poll"):
                store.runs.poll_run(exp_id, f"o{n}", 15 if int(now) % 5 == 0 else 0)
                due[key] = at + 2
            else:
                store.log_tail.append(exp_id, [LINE] * 5, int(now * 1000))
                reporter(exp_id, 0.002, 500, 0.5)  # flushes every 15 s, as the real one
                due[key] = at + 1
        stop.wait(max(0.0, min(due.values()) - time.monotonic()))


def api_loop(url: str, out: dict[str, list[float]], stop: threading.Event) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
        while not stop.is_set():
            for name, path in ENDPOINTS:
                t = time.perf_counter()
                c.get(path).raise_for_status()
                out[name].append(time.perf_counter() - t)
            stop.wait(0.2)


@contextmanager
def api_server(redis_url: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A real `ajet-runner serve` (as bench_api.serving_api), with its process: it is paused (SIGSTOP)
    while a scan or a check is counted, so that its own reads (it warms its rows after new records,
    in bursts) never count as theirs."""
    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_url, "AJET_RUNNER_TOKEN": TOKEN}
    server = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--port", str(port), "--log-level", "warning"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        limit = time.monotonic() + 60
        while time.monotonic() < limit:
            with suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield url, server
    finally:
        server.send_signal(signal.SIGCONT)
        server.terminate()
        server.wait(15)


@contextmanager
def paused(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


def p95(xs: list[float]) -> float:
    if len(xs) < 2:
        return xs[0] * 1000 if xs else float("nan")
    return statistics.quantiles(xs, n=20, method="inclusive")[-1] * 1000


@dataclass
class Row:
    nodes: int
    runs: int
    queued: int
    scan: Cost = field(default_factory=Cost)  # per scan of a node that does not hold the lease
    check: Cost = field(default_factory=Cost)  # per check of the lease holder
    phases: dict[str, Cost] = field(default_factory=dict)  # per second
    api: dict[str, float] = field(default_factory=dict)  # p95 ms alone
    api_loaded: dict[str, float] = field(default_factory=dict)  # p95 ms with everything running
    sups: list[NodeSupervisor] = field(default_factory=list)


def phase(r: redis.Redis, seconds: float, starters: list[Callable[[threading.Event], threading.Thread]]) -> Cost:
    floor = quiet(r)
    stop = threading.Event()
    threads = [start(stop) for start in starters]
    time.sleep(1.0)  # every loop started, past the first scans
    before = Cost.now(r)
    time.sleep(seconds)
    out = [Cost.now(r) - before - floor.scaled(seconds)]
    stop.set()
    for t in threads:
        t.join(30)
    return out[0].per(seconds)


def thread(target: Callable[..., None], *args: object) -> Callable[[threading.Event], threading.Thread]:
    def start(stop: threading.Event) -> threading.Thread:
        t = threading.Thread(target=target, args=(*args, stop), daemon=True)
        t.start()
        return t
    return start


def measure(srv: EmbeddedRedis, api: tuple[str, subprocess.Popen[bytes]], nodes: int, runs: int, queued: int,
            seconds: float, drivers: Cost | None) -> Row:
    api_url, api_proc = api
    with paused(api_proc):
        row = counted(srv, nodes, runs, queued)
    sups = row.sups
    r = redis.Redis.from_url(srv.url)
    node_threads = [thread(node_loop, sup, (i % 30) / 10) for i, sup in enumerate(sups)]
    driver_threads = [thread(driver_loop, srv.url, n, runs) for n in range(nodes)]
    alone: dict[str, list[float]] = {name: [] for name, _ in ENDPOINTS}
    loaded: dict[str, list[float]] = {name: [] for name, _ in ENDPOINTS}
    row.phases["nodes"] = phase(r, seconds, node_threads)
    row.phases["drivers"] = drivers if drivers is not None else phase(r, seconds, driver_threads)
    row.phases["api"] = phase(r, seconds, [thread(api_loop, api_url, alone)])
    row.phases["all"] = phase(r, seconds, [*node_threads, *driver_threads, thread(api_loop, api_url, loaded)])
    row.api = {k: p95(v) for k, v in alone.items()}
    row.api_loaded = {k: p95(v) for k, v in loaded.items()}
    for sup in sups:
        sup.queue_check.leave()
        sup.store.r.close()
    return row


def counted(srv: EmbeddedRedis, nodes: int, runs: int, queued: int) -> Row:
    """Per scan of a node that does not hold the lease, per check of the one that does."""
    r = redis.Redis.from_url(srv.url)
    row = Row(nodes, runs, queued)
    sups = supervisors(srv.url, nodes, runs)
    stand_in = ClusterLease(r, LEASE_NAME, "bench-stand-in", 3600)
    r.delete(stand_in.key)
    assert stand_in.hold()
    for sup in sups:  # warm: indexes checked, scripts loaded, every node alive
        sup.heartbeat()
        sup.adopt_orphans()
    rounds = max(1, min(5, 300 // nodes))
    out: list[Cost] = []
    with measured(r, out):
        for _ in range(rounds):
            for sup in sups:
                sup.adopt_orphans()
    row.scan = out[0].per(rounds * nodes)
    stand_in.release()
    holder = sups[0].queue_check
    assert holder.lease.hold()
    holder.check(sups[0].store.server_time())
    out = []
    with measured(r, out):
        for _ in range(5):
            holder.check(sups[0].store.server_time())
    row.check = out[0].per(5)
    holder.leave()
    row.sups = sups
    return row


def print_table(rows: list[Row], seconds: float, file: Any = None) -> None:
    out = file or sys.stdout
    print("\nPer scan of a node not holding the queue-check lease, and per check of the holder "
          "(Redis CPU ms / commands / kB in+out):", file=out)
    print("nodes x runs x queued | node scan: ms  cmds   kB | queue check: ms   cmds     kB", file=out)
    for w in rows:
        print(f"{w.nodes:5d} x {w.runs:2d} x {w.queued:6d} | {w.scan.cpu * 1e3:10.3f} {w.scan.commands:5.1f} "
              f"{w.scan.bytes / 1e3:5.2f} | {w.check.cpu * 1e3:14.2f} {w.check.commands:6.0f} "
              f"{w.check.bytes / 1e3:6.1f}", file=out)
    print(f"\nOn the real schedule, {seconds:.0f} s each: Redis CPU % of a core / commands/s / kB/s in+out", file=out)
    print("nodes x runs x queued |         nodes          |        drivers         |          API           |"
          "          all           | API p95 ms alone: running queued /metrics | with all running: same", file=out)
    for w in rows:
        cells = " | ".join(f"{c.cpu * 100:5.1f}% {c.commands:6.0f} {c.bytes / 1e3:7.1f}"
                           for c in (w.phases[k] for k in ("nodes", "drivers", "api", "all")))
        alone = " ".join(f"{w.api[k]:7.1f}" for k, _ in ENDPOINTS)
        loaded = " ".join(f"{w.api_loaded[k]:7.1f}" for k, _ in ENDPOINTS)
        print(f"{w.nodes:5d} x {w.runs:2d} x {w.queued:6d} | {cells} | {alone:>41} | {loaded}", file=out)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10 and 100 nodes, 0 and 2,000 queued, 3 s phases")
    ap.add_argument("--seconds", type=float, default=None, help="each phase's length (default 5, quick 3)")
    ap.add_argument("--nodes", default="10,50,100")
    ap.add_argument("--runs", type=int, default=8, help="running runs per node")
    ap.add_argument("--queued", default="0,500,2000,10000")
    args = ap.parse_args(argv[1:])
    if args.quick:
        args.nodes, args.queued = "10,100", "0,2000"
    seconds = args.seconds or (3.0 if args.quick else 5.0)
    node_sizes = [int(x) for x in args.nodes.split(",")]
    queue_sizes = sorted(int(x) for x in args.queued.split(","))
    rows = []
    for nodes in node_sizes:
        with EmbeddedRedis() as srv, api_server(srv.url) as api:
            store = Store(redis.Redis.from_url(srv.url), retention_seconds=0)
            t0 = time.monotonic()
            add_running(store, nodes, args.runs)
            have, drivers = 0, None
            for q in queue_sizes:
                add_queued(store, have, q, nodes)
                have = q
                print(f"{nodes} nodes x {args.runs} running, {q} queued (set up in "
                      f"{time.monotonic() - t0:.0f} s so far)...", file=sys.stderr, flush=True)
                row = measure(srv, api, nodes, args.runs, q, seconds, drivers)
                drivers = row.phases["drivers"]  # the drivers read nothing of the queue: measured once per size
                rows.append(row)
                print_table([row], seconds, file=sys.stderr)
    print_table(rows, seconds)


if __name__ == "__main__":
    main(sys.argv)
