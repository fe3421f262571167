"""Control-plane costs against one Redis: a node's scan at 50 nodes x 8 runs, and filtered lists at 30k.

Simulated records are written through the real store (the transition script keeps the indexes as in
production): N nodes x R launched runs, a queue of Q, and F finished records with realistic big fields.

- scan: what one supervisor reads every 3 s (the queue-check lease, held by another node, + its own
  node's active set, only the needed fields), next to what the old scan read (every unfinished record,
  whole) — and the same scan with 1 node in the cluster: the ratio shows it does not grow with the other nodes' runs;
- list: `GET /v1/experiments?state=running|queued` through a real `ajet-runner serve`, next to the
  same server's `/healthz` (the floor).

    python bench/bench_control_plane.py [nodes] [runs_per_node] [finished]
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
import redis

from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.store.lease import ClusterLease
from ajet_runner.store.store import Store
from ajet_runner.workers.node.queue_check import LEASE_NAME, QueueChecker
from ajet_runner.workers.node.supervisor import SCAN_FIELDS
from bench.bench_api import TOKEN, serving_api

with __import__("contextlib").suppress(OSError):
    os.nice(10)

BIG = {"blueprint": "## [exp_purpose]\nGRPO vs PPO\n" + "notes " * 400,
       "ctx": {"attempts": [{"number": 1}], "yaml_changes": [{"key": "a", "old": 1, "new": 2}] * 10}}


def fill(store: Store, nodes: int, runs: int, queued: int, finished: int) -> None:
    n = 0
    for node in range(nodes):
        for _ in range(runs):
            store.records.create(f"r{n}", {"state": "queued", **BIG}, {})
            for state in ("launching", "running"):
                store.records.transition(f"r{n}", expected_version=None,
                                         fields={"state": state, "node": f"node{node}",
                                                 "lease_until": time.time() + 60},
                                         event={"type": "transition"}, node=f"node{node}")
            n += 1
    for i in range(queued):
        store.records.create(f"q{i}", {"state": "queued", **BIG}, {})
    pipe = store.r.pipeline(transaction=False)
    for i in range(finished):  # written directly (fast), then indexed as an older store would be
        pipe.hset(f"ajet:exp:f{i}", mapping={"id": f"f{i}", "state": "finished", "outcome": "completed",
                                               "created_at": str(i), "node": f"node{i % max(nodes, 1)}",
                                               "blueprint": BIG["blueprint"], "ctx": json.dumps(BIG["ctx"])})
        pipe.zadd("ajet:experiments", {f"f{i}": i})
        if i % 2000 == 1999:
            pipe.execute()
    pipe.execute()
    store.r.delete("ajet:index_version")
    store.indexes.backfill()


def timed(fn, repeat: int = 20) -> tuple[float, int]:
    out, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        res = fn()
        out.append(time.perf_counter() - t0)
        size = len(json.dumps(res, default=str))
    return statistics.median(out) * 1000, size


def scan_costs(store: Store, node: str) -> tuple[tuple[float, int], tuple[float, int]]:
    # a node whose supervisor does not hold the queue-check lease (all but one: workers/node/queue_check.py)
    ClusterLease(store.r, LEASE_NAME, "another-node", 3600).hold()
    check = QueueChecker(store, node, 300.0)
    new = timed(lambda: (check.run(0.0), store.indexes.node_active(node, SCAN_FIELDS)))
    old = timed(lambda: store.records.unfinished(), repeat=5)
    return new, old


def main(argv: list[str]) -> None:
    nodes = int(argv[1]) if len(argv) > 1 else 50
    runs = int(argv[2]) if len(argv) > 2 else 8
    finished = int(argv[3]) if len(argv) > 3 else 30_000
    queued = 20
    with EmbeddedRedis() as srv:
        store = Store(redis.Redis.from_url(srv.url))
        fill(store, 1, runs, queued, 0)
        (one_ms, one_b), _ = scan_costs(store, "node0")
        store.r.flushall()
        fill(store, nodes, runs, queued, finished)
        (many_ms, many_b), (old_ms, old_b) = scan_costs(store, "node0")
        lists = {}
        with serving_api(srv.url) as url, httpx.Client(
                base_url=url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30) as c:
            for name, path in (("healthz", "/healthz"), ("state=running", "/v1/experiments?state=running"),
                               ("state=queued", "/v1/experiments?state=queued"),
                               ("node=node0", "/v1/experiments?node=node0"),
                               ("state=finished&limit=100", "/v1/experiments?state=finished&limit=100")):
                c.get(path).raise_for_status()
                lists[name] = timed(lambda p=path: c.get(p).raise_for_status() and None)[0]
    total = nodes * runs + queued + finished
    print(f"control plane: {nodes} nodes x {runs} runs, {queued} queued, {finished:,} finished ({total:,} records)")
    print(f"node scan (lease look + own active set, fields): {many_ms:7.2f} ms {many_b / 1000:8.1f} kB"
          f" | same scan, 1 node x {runs} runs: {one_ms:7.2f} ms {one_b / 1000:6.1f} kB"
          f" | ratio {many_ms / one_ms:4.2f}x")
    print(f"old scan (every unfinished record, whole):       {old_ms:7.2f} ms {old_b / 1000:8.1f} kB"
          f" | new/old {many_ms / old_ms:5.3f}; at a scan every 3 s on each of {nodes} nodes the old one "
          f"moved {old_b * nodes / 3 / 1e6:.1f} MB/s, the new {many_b * nodes / 3 / 1e6:.2f} MB/s")
    floor = lists.pop("healthz")
    for name, ms in lists.items():
        print(f"GET /v1/experiments?{name:<26} median {ms:6.2f} ms | floor /healthz {floor:5.2f} ms"
              f" | ratio {ms / floor:4.1f}x (target ≤ 20 ms)")


if __name__ == "__main__":
    main(sys.argv)
