"""Throughput of submissions and latency of reads through a real `ajet-runner serve` on a private Redis.

Run: .venv/bin/python bench/bench_api.py [--submissions 300] [--threads 4] [--reads 500] [--max-seconds 60]
No workers: submissions just queue. Every submission parses and validates the blueprint and
reads its YAML from disk, like a real one. Prints requests/s and p50/p95/p99 in milliseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
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


def main() -> None:
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
