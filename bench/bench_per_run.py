"""CPU and memory per watched run: a real worker's process tree against a minimal watcher.

K runs print 5 lines/s each; over a window, the worker's tree (supervisor and its watcher)
is measured — CPU seconds per second per run and PSS per run — next to a minimal watcher of the
same K logs (one Python process: read new bytes at our poll interval, search them for "Error"), the floor.
Target: ≤ 5 MB and ≤ 0.03 % of a core per watched run (issue 27).

    python bench/bench_per_run.py [runs] [seconds]
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import psutil

from ajet_runner.service.submit import submit
from ajet_runner.store.settings import get_settings
from bench._harness import blueprint, cluster, wait
from bench.bench_redis_traffic import SCRIPT

MINIMAL = """
import os, re, sys, time
every, paths, offsets, pat = float(sys.argv[1]), sys.argv[2:], {}, re.compile(rb"Error")
while True:
    for p in paths:
        try:
            with open(p, "rb") as f:
                f.seek(offsets.get(p, 0)); data = f.read(); offsets[p] = f.tell()
            pat.search(data)
        except OSError:
            pass
    time.sleep(every)
"""


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def measure(procs_of, seconds: float) -> tuple[float, float]:
    """(CPU seconds per second, PSS bytes) of the processes `procs_of()` returns, over `seconds`."""
    def cpu(ps: list[psutil.Process]) -> dict[int, float]:
        out = {}
        for p in ps:
            try:
                t = p.cpu_times()
                out[p.pid] = t.user + t.system
            except psutil.Error:
                pass
        return out
    before = cpu(procs_of())
    time.sleep(seconds)
    ps = procs_of()
    after = cpu(ps)
    used = sum(after[k] - before.get(k, after[k]) for k in after)
    pss = 0
    for p in ps:
        with contextlib.suppress(psutil.Error):
            pss += p.memory_full_info().pss
    return used / seconds, float(pss)


def settle(procs_of, timeout: float = 60.0) -> None:
    """Until the processes use under 1 % of a core over 2 s (an idle figure taken during the start-up's
    imports made the per-run figure negative on a loaded machine)."""
    time.sleep(3)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and measure(procs_of, 2.0)[0] > 0.01:
        pass


def main(argv: list[str]) -> None:
    runs = int(argv[1]) if len(argv) > 1 else 4
    seconds = float(argv[2]) if len(argv) > 2 else 20.0
    with cluster() as c:
        worker = c.worker(slots=runs)
        wait(lambda: c.store.nodes.all(), 30, "the worker")
        settle(lambda: tree(worker.pid))  # the watcher's start-up (imports, plot preload) is over
        idle_cpu, idle_pss = measure(lambda: tree(worker.pid), seconds / 2)
        ids = [submit(c.store, blueprint(c.work / f"run{i}", SCRIPT).read_text(), node="bench")["id"]
               for i in range(runs)]
        wait(lambda: all(c.state(e) == "running" for e in ids), 90, "all running")
        time.sleep(5)
        busy_cpu, busy_pss = measure(lambda: tree(worker.pid), seconds)
        logs = [str(c.work / f"run{i}/results/logs/attempt-1.log") for i in range(runs)]
        minimal = subprocess.Popen([sys.executable, "-c", MINIMAL, str(get_settings().poll_interval), *logs])
        time.sleep(1)
        min_cpu, min_pss = measure(lambda: tree(minimal.pid), seconds)
        minimal.kill()
        minimal.wait()
        for e in ids:
            c.store.runs.request_cancel(e)
        wait(lambda: all(c.state(e) == "finished" for e in ids), 120, "all stopped")
    per_cpu = (busy_cpu - idle_cpu) / runs * 100
    per_pss = (busy_pss - idle_pss) / runs / 1e6
    print(f"per watched run: {runs} runs printing 5 lines/s, {seconds:.0f} s window; worker with {runs} slots; "
          f"poll interval {get_settings().poll_interval:g} s (ours and the minimal watcher's)")
    print(f"CPU  ours {per_cpu:7.3f} % of a core | minimal watcher {min_cpu / runs * 100:7.4f} % | ratio "
          f"{per_cpu / max(min_cpu / runs * 100, 1e-9):6.1f}x (target ≤ 0.03 %)")
    print(f"PSS  ours {per_pss:7.1f} MB per run | minimal watcher {min_pss / runs / 1e6:6.2f} MB | "
          f"idle worker with {runs} slots {idle_pss / 1e6:6.1f} MB (target ≤ 5 MB per run)")


if __name__ == "__main__":
    main(sys.argv)
