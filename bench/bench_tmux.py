"""Costs of the tmux runner's operations, on a private tmux socket.

Run: .venv/bin/python bench/bench_tmux.py [--sessions 20]
Prints the median (and max) of each operation in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ajet_runner.workers.executors.local.procs import processes_with_marker
from ajet_runner.workers.executors.local.tmux import RunHandle, TmuxRunner

T = TypeVar("T")
MARKER = "AJET_RUNNER_EXPERIMENT"


def timed(samples: dict[str, list[float]], name: str, fn: Callable[[], T]) -> T:
    started = time.perf_counter()
    out = fn()
    samples.setdefault(name, []).append((time.perf_counter() - started) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sessions", type=int, default=20)
    n = parser.parse_args().sessions
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-tmux-") as tmp:
        root = Path(tmp)
        sock = str(root / "tmux.sock")
        runner = TmuxRunner(sock, linger=0)
        try:
            handles: list[RunHandle] = []
            for i in range(n):
                kw = {"log_path": root / f"{i}.log", "rc_path": root / f"{i}.rc", "pid_path": root / f"{i}.pid"}
                env = {MARKER: f"bench-{i}", "PYTHONUNBUFFERED": "1"}
                handle = timed(
                    samples,
                    "start (to pid known)",
                    lambda i=i, kw=kw, env=env: runner.start(f"ajet_bench_{i}", "sleep 100", cwd=tmp, env=env, **kw),
                )
                assert handle.pid is not None
                handles.append(handle)
            for handle in handles:
                assert timed(samples, "is_running", lambda h=handle: runner.is_running(h))
                assert timed(samples, "exit_code (none yet)", lambda h=handle: runner.exit_code(h)) is None
            timed(samples, "processes_with_marker (one scan)", lambda: processes_with_marker(MARKER, "bench-0"))
            timed(samples, "list_sessions", runner.list_sessions)
            timed(samples, "capture", lambda: runner.capture(handles[0].session))
            for handle in handles:
                rc = timed(samples, "stop (SIGINT enough)", lambda h=handle: runner.stop(h, grace=5))
                assert rc == 130, rc
                assert timed(samples, "exit_code (recorded)", lambda h=handle: runner.exit_code(h)) == 130
            for i in range(n):
                kw = {"log_path": root / f"q{i}.log", "rc_path": root / f"q{i}.rc", "pid_path": root / f"q{i}.pid"}

                def quick(i: int = i, kw: dict[str, Path] = kw) -> int | None:
                    handle = runner.start(f"ajet_quick_{i}", "exit 3", cwd=tmp, env={}, **kw)
                    return runner.wait_for_exit(handle, 10)

                assert timed(samples, "start + exit code of `exit 3`", quick) == 3
        finally:
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)
    print(f"{n} sessions, tmux socket private; milliseconds")
    width = max(len(k) for k in samples)
    for name, values in samples.items():
        print(f"  {name:<{width}}  median {statistics.median(values):8.2f}  max {max(values):8.2f}  (n={len(values)})")


if __name__ == "__main__":
    main()
