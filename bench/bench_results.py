"""How fast and how lean `parse_val_file` is on ~100 MB validation files (classic and swarm).

Each parse runs in a fresh child process so its peak RSS (getrusage ru_maxrss) is its own.
Usage: python bench/bench_results.py [--mb 100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def classic_line(step: int, rng: random.Random) -> str:
    tasks = 1319
    solved = rng.randint(900, 1200)
    all_pass = rng.randint(500, solved)
    p1 = rng.random()
    return (
        f"{{'global_steps': {step}, 'pass_n': 4, 'total_tasks': {tasks}, 'num_all_success_tasks': {all_pass}, "
        f"'num_pass_n_tasks(pass@4)': {solved}, 'task_pass_rate@1': {p1!r}, 'task_pass_rate@4': {solved / tasks!r}, "
        f"'task_pass_rate@4-all-pass': {all_pass / tasks!r}, 'mean_reward': {p1!r}, "
        f"'std_reward': np.float64({rng.random()!r}), 'task_pass_rate@2': {rng.random()!r}, "
        f"'target_dataset_name': 'main_val_dataset'}}\n"
    )


def swarm_block(step: int, label: str, rng: random.Random) -> str:
    tasks = 80
    solved = rng.randint(20, 70)
    return (
        f"\n## Step {step}\n- dataset: {label}\n- pass_n: 4\n- total_tasks: {tasks}\n"
        f"- num_all_success_tasks: {rng.randint(0, solved)}\n- num_pass_n_tasks: {solved}\n"
        f"- task_pass_rate@1: {rng.random() * 100:.2f}%\n- task_pass_rate@4: {solved / tasks * 100:.2f}%\n"
        f"- mean_reward: {rng.random():.4f}\n- std_reward: {rng.random():.4f}\n- n_rollouts: {tasks * 4}\n"
    )


def generate(path: Path, kind: str, target_bytes: int, relaunch_every: int) -> int:
    """Write a file of about target_bytes; every `relaunch_every` steps the run is relaunched
    from an earlier step (repeated steps, as resumed runs write), with a cut last record."""
    rng = random.Random(1234)
    written = 0
    step = 0
    records = 0
    with path.open("w") as f:
        while written < target_bytes:
            if kind == "classic":
                text = classic_line(step, rng)
            else:
                text = swarm_block(step, "AIME-2025", rng) + swarm_block(step, "DAPO-Math-Tiny-Val", rng)
            f.write(text)
            written += len(text)
            records += 1
            step += 1
            if relaunch_every and records % relaunch_every == 0:
                step -= relaunch_every // 4  # the relaunch resumes from an older checkpoint
        f.write(text[: len(text) - 30])  # killed mid-write
    return records


def child(path: str) -> None:
    sys.path.insert(0, str(REPO))
    from ajet_runner.statemachine.logs.results import parse_val_file

    before = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    summary = parse_val_file(path)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    peak_kb = after.ru_maxrss
    print(
        json.dumps(
            {
                "seconds": elapsed,
                "cpu_seconds": cpu,
                "peak_rss_mb": peak_kb / 1024,
                "evaluations": len(summary.evaluations),
                "skipped": summary.skipped,
                "final_step": summary.final.get("step"),
            }
        )
    )


def baseline_rss_mb() -> float:
    """Peak RSS of a child that only imports the module: the interpreter + pydantic floor."""
    code = (
        f"import sys, resource; sys.path.insert(0, {str(REPO)!r}); import ajet_runner.statemachine.logs.results; "
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=100.0, help="size of each generated file")
    parser.add_argument("--relaunch-every", type=int, default=2000, help="steps between relaunches (0: none)")
    parser.add_argument("--keep", type=Path, default=None, help="write the files here and keep them")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return

    floor = baseline_rss_mb()
    load = os.getloadavg()[0]
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {load:.1f}; "
          f"import-only peak RSS {floor:.1f} MB")
    with tempfile.TemporaryDirectory() as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        for kind in ("classic", "swarm"):
            path = where / f"{kind}_val.md"
            t0 = time.perf_counter()
            records = generate(path, kind, int(args.mb * 1024 * 1024), args.relaunch_every)
            size_mb = path.stat().st_size / (1024 * 1024)
            gen_s = time.perf_counter() - t0
            proc = subprocess.run(
                [sys.executable, __file__, "--child", str(path)], capture_output=True, text=True, check=True
            )
            r = json.loads(proc.stdout)
            print(
                f"{kind:8s} {size_mb:7.1f} MB, {records} records written in {gen_s:.1f}s -> "
                f"{r['evaluations']} evaluations, skipped {r['skipped']}, final step {r['final_step']}: "
                f"parse {r['seconds']:.2f}s wall = {size_mb / r['seconds']:.1f} MB/s "
                f"({r['cpu_seconds']:.2f}s CPU = {size_mb / r['cpu_seconds']:.1f} MB/s), "
                f"peak RSS {r['peak_rss_mb']:.0f} MB"
            )


if __name__ == "__main__":
    main()
