"""Throughput of submissions and latency of reads through a real `ajet-runner serve` on a private Redis.

Run: .venv/bin/python bench/bench_api.py [--submissions 300] [--threads 4] [--reads 500] [--max-seconds 60]
No workers: submissions just queue. Every submission parses and validates the blueprint and
reads its YAML from disk, like a real one. Prints requests/s and p50/p95/p99 in milliseconds.

    .venv/bin/python bench/bench_api.py filters [--sizes 1000,10000,30000] [--samples 40]

times every documented list filter (state, node, outcome, stage, their combinations, the purpose search)
through the API and the console's table, at each size: records with realistic big fields are written
straight into Redis and indexed by the upgrade's backfill (what the transition script keeps is the same,
tests/integration/test_filters.py). Prints p50/p95 per query, next to `/healthz` (the floor).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from ajet_runner.service.client.api_client import AjetRunnerClient
from ajet_runner.service.demo import materialize
from ajet_runner.service.embedded import EmbeddedRedis

TOKEN = "bench-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving_api(redis_url: str) -> Iterator[str]:
    """A real `ajet-runner serve` on a free port (token TOKEN), answering /healthz; yields its URL."""
    port = free_port()
    env = {**os.environ, "REDIS_URL": redis_url, "AJET_RUNNER_TOKEN": TOKEN}
    server = subprocess.Popen([sys.executable, "-m", "cli", "serve", "--port", str(port), "--log-level", "warning"],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        limit = time.monotonic() + 30
        while time.monotonic() < limit:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait(15)


def percentiles(ms: list[float]) -> str:
    if not ms:
        return "no samples"
    q = statistics.quantiles(ms, n=100, method="inclusive") if len(ms) > 1 else ms * 99
    return f"p50 {q[49]:7.2f}  p95 {q[94]:7.2f}  p99 {q[98]:7.2f}  max {max(ms):7.2f} ms  (n={len(ms)})"


def timed_calls(fn: Callable[[int], object], count: int, threads: int, deadline: float) -> tuple[list[float], float]:
    """Call fn(i) `count` times on `threads` threads (stopping at `deadline`); latencies (ms) and wall time (s)."""

    def one(i: int) -> float | None:
        if time.monotonic() > deadline:
            return None
        t0 = time.perf_counter()
        fn(i)
        return (time.perf_counter() - t0) * 1000

    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        samples = [s for s in pool.map(one, range(count)) if s is not None]
    return samples, time.perf_counter() - started


WORDS = ("GRPO", "PPO", "math", "countdown", "lr sweep", "kl", "entropy", "qwen", "webshop", "baseline")
OUTCOME_MIX = ("completed",) * 5 + ("failed",) * 2 + ("early_stopped", "timed_out", "cancelled")
STATE_MIX = ("finished",) * 90 + ("running",) * 5 + ("queued",) * 3 + ("failing", "collecting")
BIG_FIELDS = {"blueprint": "## [exp_purpose]\nGRPO vs PPO\n" + "notes " * 400,
              "ctx": json.dumps({"attempts": [{"number": 1}], "yaml_changes": [{"key": "a", "old": 1, "new": 2}] * 10})}
NODE_COUNT, STAGE_COUNT = 8, 40
FILTER_QUERIES = (
    ("API no filter", "/v1/experiments"),
    ("API state=running", "/v1/experiments?state=running"),
    ("API state=queued", "/v1/experiments?state=queued"),
    ("API state=finished", "/v1/experiments?state=finished"),
    ("API node=node0", "/v1/experiments?node=node0"),
    ("API outcome=failed", "/v1/experiments?outcome=failed"),
    ("API outcome=completed", "/v1/experiments?outcome=completed"),
    ("API state=running&node=node0", "/v1/experiments?state=running&node=node0"),
    ("API node=node0&outcome=failed", "/v1/experiments?node=node0&outcome=failed"),
    ("API state=finished&outcome=failed", "/v1/experiments?state=finished&outcome=failed"),
    ("API stage=stage3", "/v1/experiments?stage=stage3"),
    ("API stage=stage3&outcome=completed", "/v1/experiments?stage=stage3&outcome=completed"),
    ("API state+node+outcome+stage", "/v1/experiments?state=finished&node=node1&outcome=completed&stage=stage5"),
    ("API outcome=failed offset=2000", "/v1/experiments?outcome=failed&offset=2000"),
    ("API q=grpo (search)", "/v1/experiments?q=grpo"),
    ("API q=grpo&outcome=failed", "/v1/experiments?q=grpo&outcome=failed"),
    ("API q=<no match>", "/v1/experiments?q=no-such-purpose"),
    ("API q=grpo older window", "/v1/experiments?q=grpo&scan_before=1700000500"),
    ("console no filter", "/ui/fragments/experiments"),
    ("console state=running", "/ui/fragments/experiments?state=running"),
    ("console outcome=failed", "/ui/fragments/experiments?outcome=failed"),
    ("console node=node0&outcome=failed", "/ui/fragments/experiments?node=node0&outcome=failed"),
    ("console stage=stage3", "/ui/fragments/experiments?stage=stage3"),
    ("console q=grpo", "/ui/fragments/experiments?q=grpo"),
    ("console q=grpo&state=finished page 3", "/ui/fragments/experiments?q=grpo&state=finished&page=3"),
    ("console page (full, q=grpo)", "/ui/?q=grpo"),
)


def fill_records(redis_url: str, start: int, stop: int) -> None:
    """Records start..stop-1 written as an older version would have (hash + the all-records index), then the
    backfill indexes them (once, as an upgraded API does at its start)."""
    import random

    import redis

    from ajet_runner.store.store import Store

    rng = random.Random(start)
    client = redis.Redis.from_url(redis_url)
    pipe = client.pipeline(transaction=False)
    for i in range(start, stop):
        state = rng.choice(STATE_MIX)
        fields = {"id": f"x{i:06d}", "version": "3", "state": state, "created_at": repr(1.7e9 + i),
                  "purpose": " ".join(rng.sample(WORDS, 3)), "node": f"node{i % NODE_COUNT}",
                  "outcome": rng.choice(OUTCOME_MIX) if state == "finished" else "",
                  "stage": f"stage{rng.randrange(STAGE_COUNT)}" if rng.random() < 0.3 else "", **BIG_FIELDS}
        pipe.hset(f"ajet:exp:x{i:06d}", mapping=fields)
        pipe.zadd("ajet:experiments", {f"x{i:06d}": 1.7e9 + i})
        if fields["stage"]:
            pipe.zadd("ajet:stages", {fields["stage"]: 1.7e9}, nx=True)
        if i % 1000 == 999:
            pipe.execute()
    pipe.execute()
    Store(client, retention_seconds=30 * 86400).indexes.backfill(force=True)
    client.close()


def bench_filters(sizes: list[int], samples: int) -> None:
    """p50/p95 of every documented filter through a real `serve`, at each size."""
    with EmbeddedRedis() as redis_server, serving_api(redis_server.url) as url, httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {TOKEN}", "Accept": "text/html"}, timeout=60) as c:
        print(f"ajet-runner list filters: {samples} sequential requests per query, 2 cores "
              f"({os.cpu_count()} visible), load average {os.getloadavg()[0]:.1f} at the start")
        import redis

        stats = redis.Redis.from_url(redis_server.url)
        done = 0
        for size in sizes:
            fill_records(redis_server.url, done, size)
            done = size
            print(f"\n{size:,} records ({NODE_COUNT} nodes, {STAGE_COUNT} stages; load average "
                  f"{os.getloadavg()[0]:.1f})")
            worst = 0.0
            for name, path in (("/healthz (floor)", "/healthz"), *FILTER_QUERIES):
                c.get(path).raise_for_status()
                ms = []
                stats.config_resetstat()
                for _ in range(samples):
                    t0 = time.perf_counter()
                    resp = c.get(path)
                    ms.append((time.perf_counter() - t0) * 1000)
                    resp.raise_for_status()
                redis_ms = sum(v["usec"] for k, v in stats.info("commandstats").items()
                               if k != "cmdstat_config") / 1000 / samples
                q = statistics.quantiles(ms, n=100, method="inclusive")
                total = resp.json().get("total", "") if path.startswith("/v1/") else ""
                if path != "/healthz":
                    worst = max(worst, q[94])
                print(f"  {name:<40} p50 {q[49]:7.2f}  p95 {q[94]:7.2f} ms | Redis {redis_ms:6.2f} ms/request"
                      f"{f' | total {total}' if total != '' else ''}")
            print(f"  worst p95 at {size:,}: {worst:.2f} ms (target <= 20 ms)")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "filters":
        parser = argparse.ArgumentParser(prog="bench_api.py filters")
        parser.add_argument("--sizes", default="1000,10000,30000")
        parser.add_argument("--samples", type=int, default=40)
        opts = parser.parse_args(sys.argv[2:])
        bench_filters([int(x) for x in opts.sizes.split(",")], opts.samples)
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--submissions", type=int, default=300)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--reads", type=int, default=500)
    parser.add_argument("--max-seconds", type=float, default=60.0, help="stop each phase after this long")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp, EmbeddedRedis() as redis_server:
        base = materialize("demo", Path(tmp) / "demo").read_text()
        # each submission its own result dir (one in use by a queued run is refused with 409)
        texts = [re.sub(r"## \[exp_result_dir\]\n.*?\n", f"## [exp_result_dir]\n{tmp}/results/{i}\n", base)
                 for i in range(args.submissions)]
        with serving_api(redis_server.url) as url:
            clients = [AjetRunnerClient(url, TOKEN) for _ in range(args.threads)]
            ids: list[str] = []
            numbers = itertools.count()

            def submit(i: int) -> None:
                ids.append(clients[i % args.threads].submit(texts[next(numbers)])["id"])

            def phase(name: str, fn: Callable[[int], object], count: int, threads: int) -> None:
                samples, wall = timed_calls(fn, count, threads, time.monotonic() + args.max_seconds)
                print(f"{name:<38} {len(samples) / wall:8.1f} req/s   {percentiles(samples)}")

            print(f"ajet-runner API bench: {args.submissions} submissions, {args.reads} reads, "
                  f"{args.threads} client threads, 2 cores ({os.cpu_count()} visible)")
            phase("submit (1 thread)", submit, args.submissions // 2, 1)
            phase(f"submit ({args.threads} threads)", submit, args.submissions - args.submissions // 2, args.threads)
            phase("GET /v1/experiments/{id}", lambda i: clients[i % args.threads].get(ids[i % len(ids)]),
                  args.reads, args.threads)
            phase("GET /v1/experiments?limit=100", lambda i: clients[i % args.threads].list_experiments(limit=100),
                  args.reads // 5, args.threads)
            phase("GET /v1/experiments?state=queued", lambda i: clients[i % args.threads].list_experiments(
                state="queued", limit=100), args.reads // 5, args.threads)
            phase("GET .../events (JSON page)", lambda i: clients[i % args.threads].events(ids[i % len(ids)]),
                  args.reads, args.threads)
            phase("GET /healthz (no auth, no Redis)", lambda i: clients[i % args.threads].healthy(), args.reads,
                  args.threads)
            print(f"experiments recorded: {clients[0].list_experiments(limit=1)['total']}")
            for c in clients:
                c.close()


if __name__ == "__main__":
    main()
