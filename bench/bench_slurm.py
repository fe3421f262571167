"""Costs of the SLURM executor's operations against a private one-node SLURM (tests/integration/slurm_cluster.py:
munge, slurmctld, slurmd, 4 fake GPUs; started here, stopped by pid). Needs root and Debian's slurm-wlm + munge.

Run: .venv/bin/python bench/bench_slurm.py [--runs 5]
Prints the median (and max) in milliseconds of:
- submit → running: `start()` (files written, `sbatch`) until the wrapper wrote the command's pid, i.e. the
  command runs on the node (start() itself returns at that moment, or after 5 s with a pending handle);
- one look: what one watch tick costs the runner per run (`sync()` + `queue_state()` + `is_running()`,
  with a fresh `scontrol show job` each time: the executor looks at most every 2 s per run otherwise);
- stop: `stop()` (INT through the batch shell to the command, then `scancel`) until SLURM says the job
  ended and the wrapper wrote the exit code.
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

from ajet_runner.workers.executors.request import AttemptRequest
from ajet_runner.workers.executors.slurm.slurm_executor import SlurmExecutor
from tests.integration.slurm_cluster import SlurmCluster, missing_binaries

MARKER = "AJET_RUNNER_EXPERIMENT"


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values):.0f} ms (max {max(values):.0f}, n={len(values)})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    runs = parser.parse_args().runs
    missing = missing_binaries()
    if missing or os.geteuid() != 0:
        sys.exit(f"needs root and SLURM (missing: {', '.join(missing) or 'none'})")
    with tempfile.TemporaryDirectory(prefix="bench-slurm-") as tmp:
        root = Path(tmp)
        t0 = time.perf_counter()
        with SlurmCluster(root / "cluster") as cluster:
            up = (time.perf_counter() - t0) * 1000
            os.environ.update(cluster.env)
            ex = SlurmExecutor(look_every=0.0)
            submit, look, stop = [], [], []
            for i in range(runs):
                logs = root / f"run{i}" / "logs"
                logs.mkdir(parents=True)
                session = f"ajet_bench_{i}"
                ex.request(session, AttemptRequest(exp_id=f"bench{i}", attempt=1, gpus=1, max_seconds=600,
                                                   grace_seconds=10))
                started = time.perf_counter()
                handle = ex.start(session, "sleep 120", cwd=str(root), env={MARKER: f"bench{i}"},
                                  log_path=logs / "attempt-1.log", rc_path=logs / "attempt-1.rc",
                                  pid_path=logs / "attempt-1.pid", pid_timeout=60, base_env=dict(os.environ))
                while not handle.pid_path.exists():
                    time.sleep(0.005)
                submit.append((time.perf_counter() - started) * 1000)
                for _ in range(10):
                    t = time.perf_counter()
                    ex.sync(handle)
                    ex.queue_state(handle)
                    assert ex.is_running(handle)
                    look.append((time.perf_counter() - t) * 1000)
                t = time.perf_counter()
                rc = ex.stop(handle, grace=10)
                stop.append((time.perf_counter() - t) * 1000)
                assert rc == 130, rc
                assert cluster.jobs() == [], cluster.jobs()
        load = subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    print(f"private SLURM up (munged, slurmctld, slurmd; node idle): {up:.0f} ms")
    print(f"submit -> command running: {ms(submit)}")
    print(f"one look per run (scontrol show job + pid/rc files): {ms(look)}")
    print(f"stop (INT via the batch shell, then scancel) -> job ended, rc written: {ms(stop)}")
    print(f"uptime: {load}")


if __name__ == "__main__":
    main()
