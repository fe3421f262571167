"""A capacity table for one Redis and one API: simulated nodes and drivers write what real ones write.

Each simulated node is a thread doing, on the real schedule, through the real Store: its heartbeat,
its supervisor scan (the queue + its own active set, every 3 s), and for each of its runs the
driver's steady traffic — the ownership/cancel/lease look (every 2 s), the new log lines (every 1 s,
5 lines), the watch metrics (every 15 s). Meanwhile the API (a real `ajet-runner serve`) is asked
`GET /v1/experiments?state=running` and `/metrics`. Printed per size: Redis CPU (% of a core),
Redis bytes/s in+out, commands/s, and the API's p95 — with the idle Redis as the floor.

    python bench/bench_scale.py [seconds] [sizes, e.g. 10x8,50x8,100x8]
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import redis

from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.store.store import Store
from ajet_runner.workers.node.supervisor import QUEUED_FIELDS, SCAN_FIELDS
from ajet_runner.workers.node.worker_metrics import WatchReporter
from bench.bench_api import TOKEN, serving_api
from bench.bench_redis_traffic import redis_cpu

with __import__("contextlib").suppress(OSError):
    os.nice(10)

LINE = "(TaskRunner pid=1) INFO rollout: task 000042 finished with reward 1.0 in 12 turns"


def setup(store: Store, nodes: int, runs: int) -> None:
    for n in range(nodes):
        for r in range(runs):
            exp_id = f"n{n}r{r}"
            store.create(exp_id, {"state": "queued", "blueprint": "x" * 3000}, {})
            store.transition(exp_id, expected_version=None, fields={"state": "running", "node": f"node{n}",
                             "owner": f"o{n}", "lease_until": time.time() + 60}, event={"type": "t"},
                             node=f"node{n}")


def node_loop(url: str, n: int, runs: int, stop: threading.Event) -> None:
    store = Store(redis.Redis.from_url(url), retention_seconds=0)
    reporter = WatchReporter(store, f"node{n}")
    t0 = time.monotonic()
    due = {"beat": t0, "scan": t0 + (n % 30) / 10}
    for r in range(runs):
        due[f"poll{r}"] = t0 + (r * 0.37 + n * 0.11) % 2
        due[f"tail{r}"] = t0 + (r * 0.13 + n * 0.07) % 1
    while not stop.is_set():
        now = time.monotonic()
        for key, at in list(due.items()):
            if now < at:
                continue
            if key == "beat":
                store.heartbeat(f"node{n}", {"gpus": 8, "gpus_busy": 8, "slots": runs, "running": []}, ttl=30)
                due[key] = at + 2  # HEARTBEAT_SECONDS
            elif key == "scan":
                store.queued(QUEUED_FIELDS)
                store.node_active(f"node{n}", SCAN_FIELDS)
                due[key] = at + 3
            elif key.startswith("poll"):
                store.poll_run(f"n{n}r{key[4:]}", f"o{n}", 15 if int(now) % 5 == 0 else 0)
                due[key] = at + 2
            else:
                r = key[4:]
                store.append_log_tail(f"n{n}r{r}", [LINE] * 5, int(now * 1000))
                reporter(f"n{n}r{r}", 0.002, 500, 0.5)  # flushes every 15 s, as the real one
                due[key] = at + 1
        time.sleep(max(0.0, min(due.values()) - time.monotonic()))


def api_p95(url: str, stop: threading.Event, out: dict[str, list[float]]) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
        while not stop.is_set():
            for name, path in (("list", "/v1/experiments?state=running&limit=100"), ("metrics", "/metrics")):
                t = time.perf_counter()
                c.get(path).raise_for_status()
                out[name].append(time.perf_counter() - t)
            time.sleep(0.5)


def net(r: redis.Redis) -> float:
    s = r.info("stats")
    return float(s["total_net_input_bytes"]) + float(s["total_net_output_bytes"])


def main(argv: list[str]) -> None:
    seconds = float(argv[1]) if len(argv) > 1 else 15.0
    sizes = [tuple(int(x) for x in s.split("x")) for s in (argv[2] if len(argv) > 2 else "10x8,50x8").split(",")]
    rows = []
    for nodes, runs in sizes:
        with EmbeddedRedis() as srv:
            r = redis.Redis.from_url(srv.url)
            setup(Store(r, retention_seconds=0), nodes, runs)
            idle = redis_cpu(r, 3)
            with serving_api(srv.url) as url:
                stop = threading.Event()
                lat: dict[str, list[float]] = {"list": [], "metrics": []}
                threads = [threading.Thread(target=node_loop, args=(srv.url, n, runs, stop), daemon=True)
                           for n in range(nodes)]
                threads.append(threading.Thread(target=api_p95, args=(url, stop, lat), daemon=True))
                for t in threads:
                    t.start()
                time.sleep(3)  # past the first flushes
                c0, b0 = int(r.info("stats")["total_commands_processed"]), net(r)
                busy = redis_cpu(r, seconds)
                c1, b1 = int(r.info("stats")["total_commands_processed"]), net(r)
                stop.set()
                for t in threads:
                    t.join(10)

        def p95(xs: list[float]) -> float:
            return statistics.quantiles(xs, n=20)[-1] * 1000 if len(xs) > 1 else (xs[0] * 1000 if xs else 0.0)

        rows.append((nodes, runs, busy * 100, idle * 100, (b1 - b0) / seconds / 1e6, (c1 - c0) / seconds,
                     p95(lat["list"]), p95(lat["metrics"])))
    print("nodes x runs | Redis CPU % of a core (idle floor) | Redis MB/s in+out | commands/s | "
          "API p95 list / /metrics ms")
    for nodes, runs, cpu, idle, mbps, cps, pl, pm in rows:
        print(f"{nodes:5d} x {runs:<4d} | {cpu:6.1f} ({idle:4.1f}) | {mbps:6.2f} | {cps:8.0f} | {pl:7.1f} / {pm:7.1f}")


if __name__ == "__main__":
    main(sys.argv)
