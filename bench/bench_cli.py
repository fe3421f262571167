"""Start-up time of the CLI, next to the floor `python -c "import typer, rich"` measured in the same run.

Run: .venv/bin/python bench/bench_cli.py [--runs 15]
Each command is a fresh process of the installed console script (what a research agent runs hundreds of
times a day): `--help`, `scan` and `status` against a real `ajet-runner serve` on a private Redis holding
one queued experiment, `check` of the demo blueprint, `alpha-scan-jobs`, `diagnose` of a small log.
Runs are interleaved (floor, then each command, N rounds) so a load spike hits all of them alike.
Prints median / p95 of each and its ratio to the floor's median, in wall-clock time and in CPU time (user +
system, from wait4: on a machine shared with other work, wall time mostly measures the others' load).
The target is <= 3x the floor for --help, scan and status.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ajet_runner.service.demo import materialize
from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from bench._harness import line
from bench.bench_api import TOKEN, serving_api

BIN = Path(sys.executable).parent


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the process and its children) of one run."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    took = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {err.decode()[-500:]}")
    return took, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    cli = str(BIN / "ajet-runner")
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp, EmbeddedRedis() as redis_server:
        bp = materialize("demo", Path(tmp) / "demo")
        store = Store.from_url(redis_server.url)
        exp_id = submit(store, bp.read_text(), wait_for_node=True)["id"]
        log = Path(tmp) / "attempt-1.log"
        log.write_text("step 1\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
        with serving_api(redis_server.url) as url:
            # Bytecode is written (the warm-up rounds leave .pyc files), as on a user's machine: with
            # PYTHONDONTWRITEBYTECODE set in the environment, every run compiled our changed modules again.
            env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"},
                   "AJET_RUNNER_URL": url, "AJET_RUNNER_TOKEN": TOKEN}
            cases = {
                "floor: import typer, rich": [sys.executable, "-c", "import typer, rich"],
                "ajet-runner --help": [cli, "--help"],
                "ajet-runner scan": [cli, "scan"],
                "ajet-runner status ID": [cli, "status", exp_id],
                "ajet-runner check BLUEPRINT": [cli, "check", str(bp)],
                "ajet-runner diagnose LOG": [cli, "diagnose", str(log)],
                "ajet-runner scan --help": [cli, "scan", "--help"],
                "alpha-scan-jobs": [str(BIN / "alpha-scan-jobs")],
            }
            wall: dict[str, list[float]] = {name: [] for name in cases}
            cpu: dict[str, list[float]] = {name: [] for name in cases}
            for argv in cases.values():  # warm the page cache and the .pyc files
                timed(argv, env)
            for _ in range(args.runs):
                for name, argv in cases.items():
                    took, used = timed(argv, env)
                    wall[name].append(took)
                    cpu[name].append(used)
    print(f"ajet-runner CLI start-up: {args.runs} runs each, interleaved; {os.cpu_count()} CPUs visible, "
          f"load average {os.getloadavg()[0]:.1f}")
    floor = "floor: import typer, rich"
    for title, samples in (("wall clock (what the caller waits)", wall),
                           ("CPU time, user + system (steady on a shared machine)", cpu)):
        print(f"-- {title}")
        for name, xs in samples.items():
            print(line(name, xs, samples[floor]))


if __name__ == "__main__":
    main()
