"""End-to-end latencies of the runner itself (not of training), on an embedded Redis and a real worker.

Prints, for N short simulated runs: submit → command running in tmux, command exit → finish.flag,
and the whole submit → finished time. The simulated training is made as short as it goes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ajet_runner.service.demo import materialize
from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store

N = int(os.environ.get("BENCH_RUNS", "6"))


def wait(cond, timeout: float):  # tiny local helper
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.01)
    raise TimeoutError


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="ajet-bench-"))
    sock = str(work / "tmux.sock")
    with EmbeddedRedis() as redis_server:
        env = {**os.environ, "REDIS_URL": redis_server.url, "AJET_RUNNER_TMUX_SOCKET": sock,
               "AJET_RUNNER_POLL_INTERVAL": "0.1"}
        worker = subprocess.Popen([sys.executable, "-m", "ajet_runner", "worker", "--node", "bench", "--gpus", "0",
                                   "--slots", "1"], env=env, start_new_session=True,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        store = Store.from_url(redis_server.url)
        try:
            wait(lambda: store.nodes.all(), 30)
            to_running, exit_to_flag, total = [], [], []
            for i in range(N):
                bp = materialize("demo", work / f"run{i}")
                y = work / f"run{i}/codebase/tests/bench/benchmark_math/benchmark_math.yaml"
                y.write_text(y.read_text().replace("step_seconds: 1.0", "step_seconds: 0.02")
                             .replace("total_training_steps: 10", "total_training_steps: 2"))
                t0 = time.time()
                exp_id = submit(store, bp.read_text(), node="bench")["id"]
                wait(lambda i=exp_id: (store.records.raw(i) or {}).get("state") in ("running", "collecting",
                                                                                    "finished"), 60)
                running_at = next(e["at"] for e in store.events.read(exp_id) if e.get("trigger") == "launched")
                wait(lambda i=exp_id: (store.records.raw(i) or {}).get("state") == "finished", 60)
                t1 = time.time()
                results = work / f"run{i}/results"
                exited = (results / "logs/attempt-1.rc").stat().st_mtime
                flagged = (results / "finish.flag").stat().st_mtime
                assert json.loads((results / "finish.flag").read_text())["outcome"] == "completed"
                to_running.append(running_at - t0)
                exit_to_flag.append(flagged - exited)
                total.append(t1 - t0)
        finally:
            worker.terminate()
            worker.wait(30)
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)

    def fmt(xs: list[float]) -> str:
        return f"median {statistics.median(xs) * 1000:7.0f} ms   max {max(xs) * 1000:7.0f} ms"

    print(f"runs: {N} (simulated training of 2 steps x 0.02 s)")
    print(f"submit -> running in tmux : {fmt(to_running)}")
    print(f"command exit -> finish.flag: {fmt(exit_to_flag)}")
    print(f"submit -> finished (total): {fmt(total)}")


if __name__ == "__main__":
    main()
