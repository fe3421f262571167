"""Submissions through a real `ajet-runner serve` against the same server's `/healthz` and a raw RQ
`Queue.enqueue` on the same Redis, in one run. Target: submit ≥ 50 % of `/healthz`.

Every submission is a different result dir (two live experiments may not share one), so each one
parses the blueprint, validates it, reads its YAML and records and enqueues it like a real one.

    python bench/bench_submit.py [submissions] [threads]
"""

from __future__ import annotations

import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis
from rq import Queue
from rq.serializers import JSONSerializer

from ajet_runner.service.client.api_client import AjetRunnerClient
from ajet_runner.service.demo import materialize
from ajet_runner.service.embedded import EmbeddedRedis
from bench.bench_api import TOKEN, serving_api, timed_calls

with __import__("contextlib").suppress(OSError):
    os.nice(10)


def main(argv: list[str]) -> None:
    count = int(argv[1]) if len(argv) > 1 else 300
    threads = int(argv[2]) if len(argv) > 2 else 4
    with tempfile.TemporaryDirectory(prefix="bench-submit-") as tmp, EmbeddedRedis() as srv:
        base = materialize("demo", Path(tmp) / "demo").read_text()
        texts = [re.sub(r"## \[exp_result_dir\]\n.*?\n", f"## [exp_result_dir]\n{tmp}/results/{i}\n", base)
                 for i in range(2 * count)]
        with serving_api(srv.url) as url:
            clients = [AjetRunnerClient(url, TOKEN) for _ in range(threads)]
            rates: dict[str, float] = {}
            p50: dict[str, float] = {}

            def phase(name: str, fn, n: int, k: int) -> None:
                samples, wall = timed_calls(fn, n, k, time.monotonic() + 60)
                rates[name] = len(samples) / wall
                p50[name] = statistics.median(samples)

            phase("healthz", lambda i: clients[i % threads].healthy(), count, threads)
            phase("submit", lambda i: clients[i % threads].submit(texts[i]), count, threads)
            phase("healthz again", lambda i: clients[i % threads].healthy(), count, threads)
            conn = redis.Redis.from_url(srv.url)
            q = Queue("bench-raw", connection=conn, serializer=JSONSerializer)
            phase("rq", lambda i: q.enqueue("ajet_runner.workers.drive.jobs.drive", f"x{i}", job_timeout=-1),
                  count, threads)
            for c in clients:
                c.close()
    health = (rates["healthz"] + rates["healthz again"]) / 2
    print(f"submit: {count} submissions, {threads} client threads, one API process, embedded Redis, no worker")
    print(f"submit      {rates['submit']:8.1f} req/s  p50 {p50['submit']:6.1f} ms | floor /healthz "
          f"{health:8.1f} req/s (same server, before and after) | ratio {rates['submit'] / health:5.2f} "
          f"(target ≥ 0.50)")
    print(f"raw RQ Queue.enqueue from this process: {rates['rq']:8.1f} /s  p50 {p50['rq']:6.1f} ms "
          f"(submit is {rates['submit'] / rates['rq']:5.2f} of it)")


if __name__ == "__main__":
    main(sys.argv)
