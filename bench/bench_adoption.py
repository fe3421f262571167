"""Adoption after a crash: `kill -9` of a worker mid-run, a new worker started at once on the same node.

Run: .venv/bin/python bench/bench_adoption.py [--runs 3] [--lease 30]
With the lease at 30 s, a new worker that waited the dead driver's lease out would adopt after up to 30 s;
one that proves the driver dead (owner id: node, boot id, PID namespace, pid, start time) adopts as soon
as its watcher is up. Prints, per run and as medians: seconds from starting the new worker to its
supervisor's first scan (the "adoption" event) and to the new driver owning the run (the "adopted"
event), next to the floor: the same worker's start to its first heartbeat with nothing to adopt.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from bench._harness import wait
from tests.integration.scenario import make
from tests.integration.workers import kill_group, start_worker, worker_env


def one_run(tmp: Path, lease: float) -> tuple[float, float, float]:
    """(seconds to the first heartbeat with nothing to adopt, to the adoption event, to the adopted event)."""
    sock = str(tmp / "tmux.sock")
    with EmbeddedRedis() as redis_server:
        store = Store.from_url(redis_server.url)
        env = worker_env(redis_server.url, sock, AJET_RUNNER_LEASE_SECONDS=str(lease))
        sc = make("demo", tmp / "demo")
        first = start_worker(env, "n1", "--gpus", "0")
        try:
            t0 = time.monotonic()
            wait(lambda: store.nodes.all(), 120, "the first worker's heartbeat")
            floor = time.monotonic() - t0
            exp_id = submit(store, sc.blueprint.read_text(), node="n1")["id"]
            wait(lambda: (store.records.raw(exp_id) or {}).get("state") == "running", 120, "the run to be running",
                 0.05)
            dead = (store.records.raw(exp_id) or {})["owner"]
        finally:
            kill_group(first)
        t0 = time.monotonic()
        second = start_worker(env, "n1", "--gpus", "0")
        try:
            def event(kind: str) -> bool:
                return any(e.get("type") == kind for e in store.events.read(exp_id))

            wait(lambda: event("adoption"), 120, "the new supervisor's scan", 0.02)
            scanned = time.monotonic() - t0
            wait(lambda: (store.records.raw(exp_id) or {}).get("owner") not in (None, "", dead), 120, "the adoption",
                 0.02)
            adopted = time.monotonic() - t0
        finally:
            kill_group(second)
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)
    return floor, scanned, adopted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lease", type=float, default=30.0)
    args = parser.parse_args()
    rows = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="bench-adopt-") as tmp:
            rows.append(one_run(Path(tmp), args.lease))
        floor, scanned, adopted = rows[-1]
        print(f"run {i + 1}: first worker's heartbeat {floor:5.2f} s | after kill -9, new worker: scan "
              f"{scanned:5.2f} s, adopted {adopted:5.2f} s | load average {os.getloadavg()[0]:.1f}")
    med = [statistics.median(r[k] for r in rows) for k in range(3)]
    print(f"median of {args.runs}: worker start to heartbeat {med[0]:.2f} s (floor); to adoption scan {med[1]:.2f} s; "
          f"to adopted {med[2]:.2f} s (lease {args.lease:.0f} s, waited out it would be up to {args.lease:.0f} s)")


if __name__ == "__main__":
    main()
