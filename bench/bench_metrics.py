"""How long one /metrics scrape takes with 1,000 and 10,000 experiments in Redis.

Fills a private redis-server with realistic records (blueprint text, parsed blueprint, lifecycle,
log tail: the big fields a scrape must not fetch) and times `metrics_response` three ways: `cold`,
every scrape with an empty row cache (the API's first scrape after it starts); `warm`, nothing
changed since the last scrape; `churn`, a new `latest_metrics` on 10 % of the experiments with
gauges before each scrape (a new evaluation on one run in ten between two scrapes is far more than
a 15 s scrape interval sees). Then, at 10,000 live experiments, the first scrapes of a real
`ajet-runner serve` just started (it warms its row cache on a thread at start): one sent the moment
/healthz answers (racing that warm-up), one `--settle` seconds later (a Prometheus scrape after a
restart, 15 s apart), each on a fresh server, `--starts` times.

    .venv/bin/python bench/bench_metrics.py [--repeat 15] [--starts 3] [--settle 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ajet_runner.service.cluster_metrics import ROWS, metrics_response
from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.store.per_experiment.queue import queue
from ajet_runner.store.store import INDEX, Store, exp_key
from bench._harness import line
from bench.bench_api import serving_api

STATES = ("queued", "launching", "running", "failing", "repairing", "collecting")
BLUEPRINT = "## [exp_purpose]\nCompare GRPO and PPO on gsm8k.\n" + "notes " * 300
METRICS = {"mean_reward": 0.61, "std_reward": 0.4, "task_pass_rate@1": 0.5, "task_pass_rate@2": 0.6,
           "task_pass_rate@4": 0.75, "task_pass_rate@4-all-pass": 0.3, "total_tasks": 1319.0, "step": 40.0}


def record(i: int, state: str, now: float, finished_ago: float) -> dict[str, str]:
    started = now - 3600 - finished_ago
    rec = {
        "id": f"exp-{i:06d}", "version": "12", "state": state, "purpose": f"experiment {i}: GRPO vs PPO " * 3,
        "node": f"node{i % 10}", "attempt": "1", "max_seconds": "7200", "created_at": repr(started - 5),
        "started_at": repr(started), "blueprint": BLUEPRINT, "blueprint_json": json.dumps({"exp_purpose": BLUEPRINT}),
        "lifecycle": json.dumps({"state": state, "history": [{"trigger": "start", "at": started}] * 6}),
        "ctx": json.dumps({"attempts": [{"number": 1}], "yaml_changes": [{"key": "a", "old": 1, "new": 2}] * 5}),
        "log_tail": json.dumps(["(TaskRunner pid=1) step 40 reward 0.61 " * 3] * 40),
        "latest_metrics": json.dumps(METRICS), "outcome": "",
    }
    if state == "finished":
        rec.update(outcome="completed", finished_at=repr(now - finished_ago))
    return rec


LIVE = STATES[1:]  # launched, unfinished


def fill(r: redis.Redis, total: int, unfinished: int, recent: int, queued: int = -1) -> None:
    """`unfinished` records in the states cycled through (with `queued` >= 0: that many queued, the rest
    launched), `recent` finished 10 minutes ago, the rest 3 days ago; indexed as the transition script
    indexes them (a finished record expires after the retention time, 30 days)."""
    r.flushall()
    now = time.time()
    keep = 30 * 86400
    pipe = r.pipeline(transaction=False)
    for i in range(total):
        if i < unfinished:
            cycled = STATES[i % len(STATES)]
            state = cycled if queued < 0 else "queued" if i < queued else LIVE[i % len(LIVE)]
            rec = record(i, state, now, 0)
        else:
            rec = record(i, "finished", now, 600 if i < unfinished + recent else 86400 * 3)
        pipe.hset(exp_key(rec["id"]), mapping=rec)
        pipe.zadd(INDEX, {rec["id"]: float(rec["created_at"])})
        if rec["state"] == "finished":
            pipe.expire(exp_key(rec["id"]), int(float(rec["finished_at"]) + keep - now))
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    store = Store(r)
    store.indexes.backfill()  # the per-state indexes and the expiry schedule, as the transition script keeps them
    for n in range(10):
        store.nodes.heartbeat(f"node{n}", {"gpus": 8, "gpus_busy": 3, "slots": 8, "running": []}, ttl=2)
    q = queue(r, "default")
    for i in range(min(unfinished, 50)):
        q.enqueue("ajet_runner.workers.drive.jobs.drive", f"exp-{i:06d}", job_id=f"drive-{i}")
    s = store.counters.read()
    assert s is not None


def _timed(store: Store, repeat: int, before: Callable[[int], None]) -> tuple[list[float], int, int]:
    times, size, series = [], 0, 0
    for n in range(repeat):
        before(n)
        t0 = time.perf_counter()
        body, _ = metrics_response(store)
        times.append((time.perf_counter() - t0) * 1000)
        size = len(body)
        series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return times, size, series


def bench(store: Store, repeat: int, live: int) -> dict[str, float]:
    """Median ms per scrape cold / warm / churn, the worst of all, Redis's own busy ms per scrape
    (INFO commandstats, warm), body bytes, series."""
    metrics_response(store)  # warm: connections
    cold, _, _ = _timed(store, repeat, lambda _n: ROWS.rows.clear())
    metrics_response(store)
    store.r.config_resetstat()
    warm, size, series = _timed(store, repeat, lambda _n: None)
    busy_us = sum(v["usec"] for k, v in store.r.info("commandstats").items() if k != "cmdstat_config")

    def churn(n: int) -> None:
        pipe = store.r.pipeline(transaction=False)
        for i in range(n % 10, live, 10):
            pipe.hset(exp_key(f"exp-{i:06d}"), "latest_metrics", json.dumps({**METRICS, "step": 41.0 + n}))
        pipe.execute()

    churned, _, _ = _timed(store, repeat, churn)
    p95 = sorted(warm)[min(len(warm) - 1, int(0.95 * len(warm)))]
    return {"cold": statistics.median(cold), "warm": statistics.median(warm), "churn": statistics.median(churned),
            "p95": p95,
            "max": max(cold + warm + churned), "redis": busy_us / 1000 / repeat, "bytes": size, "series": series}


def first_scrapes(url: str, starts: int, settle: float) -> tuple[list[float], list[float]]:
    """ms of the first /metrics of `starts` fresh servers, sent at once / `settle` s after /healthz answers."""
    at_once, settled = [], []
    for _ in range(starts):
        for wait, out in ((0.0, at_once), (settle, settled)):
            with serving_api(url) as api:
                time.sleep(wait)  # a benchmark's fixed schedule, not a wait for a condition
                t0 = time.perf_counter()
                resp = httpx.get(f"{api}/metrics", timeout=60)
                out.append((time.perf_counter() - t0) * 1000)
                resp.raise_for_status()
    return at_once, settled


def interleaved(url_a: str, url_b: str, repeat: int) -> tuple[list[float], list[float]]:
    """ms of warm scrapes of two stores, A and B alternately (each with its own row cache), so the machine's
    load falls on both alike: the ratio of their medians is what a busy shared machine can tell."""
    stores = [Store(redis.Redis.from_url(url_a)), Store(redis.Redis.from_url(url_b))]
    rows: list[dict] = [{}, {}]
    out: tuple[list[float], list[float]] = ([], [])
    for n in range(repeat + 2):
        for k in (0, 1):
            ROWS.rows = rows[k]
            t0 = time.perf_counter()
            metrics_response(stores[k])
            if n >= 2:  # the first two fill the row caches
                out[k].append((time.perf_counter() - t0) * 1000)
            rows[k] = ROWS.rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--starts", type=int, default=3)
    parser.add_argument("--settle", type=float, default=5.0)
    args = parser.parse_args()
    cases = [
        ("1,000: 100 unfinished, 100 recently finished, 800 old", 1000, 100, 100, -1),
        ("1,000: all unfinished (worst case)", 1000, 1000, 0, -1),
        ("10,000: 200 unfinished, 500 recently finished, 9,300 old", 10_000, 200, 500, -1),
        ("10,000: all within the TTL (worst case)", 10_000, 5000, 5000, -1),
        ("10,000 live, 0 queued (the floor of the next)", 10_000, 10_000, 0, 0),
        ("10,000 live + 5,000 queued", 15_000, 15_000, 0, 5000),
    ]
    with EmbeddedRedis() as server:
        r = redis.Redis.from_url(server.url)
        store = Store(r)
        print(f"{'case':58} {'cold ms':>8} {'warm ms':>8} {'churn ms':>8} {'max ms':>8} {'redis ms':>8} "
              f"{'bytes':>10} {'series':>7}")
        got = {}
        for label, total, unfinished, recent, queued in cases:
            fill(r, total, unfinished, recent, queued)
            b = got[label] = bench(store, args.repeat, unfinished + recent)
            print(f"{label:58} {b['cold']:8.1f} {b['warm']:8.1f} {b['churn']:8.1f} {b['max']:8.1f} {b['redis']:8.1f} "
                  f"{b['bytes']:10,.0f} {b['series']:7,.0f} p95 warm {b['p95']:.1f}")
        floor, with_queue = got[cases[-2][0]], got[cases[-1][0]]
        print("5,000 queued beside 10,000 live vs none, the two runs above (target ≤ 1.5x): "
              + ", ".join(f"{k} {with_queue[k] / floor[k]:.2f}x" for k in ("warm", "cold", "churn")) + "; "
              f"load average {os.getloadavg()[0]:.1f}")
        with EmbeddedRedis() as other:  # the same two stores side by side, scraped alternately
            fill(redis.Redis.from_url(other.url), 10_000, 10_000, 0, 0)
            none, queued = interleaved(other.url, server.url, args.repeat)
        print(line("10k live + 5k queued, warm, interleaved", [q / 1000 for q in queued], [x / 1000 for x in none])
              + f" (floor: 10k live, 0 queued; target ≤ 1.5x; load average {os.getloadavg()[0]:.1f})")
        at_once, settled = first_scrapes(server.url, args.starts, args.settle)
        print(f"a fresh `ajet-runner serve`, 10,000 live experiments, first /metrics over HTTP (target ≤ 300 ms): "
              f"the moment /healthz answers {' / '.join(f'{t:.0f}' for t in at_once)} ms; "
              f"{args.settle:g} s later {' / '.join(f'{t:.0f}' for t in settled)} ms")


if __name__ == "__main__":
    main()
