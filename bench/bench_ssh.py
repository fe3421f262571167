"""Costs of the ssh executor's operations against a private sshd on this machine, beside the local tmux
executor's in the same run (docs/benchmarks.md): start to known pid, one watch tick's probe per run
(`sync` + `is_running`: shared disk, and fetched files with a growing log), and a graceful stop.

Needs Debian's openssh-server/openssh-client and root (the sshd runs as root on a free port; the host
"does not share our disk" through a tmpfs in its own mount namespace, `unshare --mount`).
Run: .venv/bin/python bench/bench_ssh.py [--runs 10]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ajet_runner.workers.executors.local.tmux import TmuxRunner
from ajet_runner.workers.executors.protocol import Executor
from ajet_runner.workers.executors.ssh.ssh_executor import SshExecutor
from tests.integration.sshd import ALIAS, running_sshd

T = TypeVar("T")
# One process printing a line every 10 ms (a bash loop would, by its wait-and-cooperative-exit rule, go on
# after a SIGINT that lands while its `sleep` exits normally: a stop would then need SIGTERM).
LOG_WRITER = (f"exec {sys.executable} -u -c 'import itertools, time\nfor i in itertools.count():\n"
              "    print(\"step\", i, \"of a long line of training output\"); time.sleep(0.01)'")


def timed(samples: dict[str, list[float]], name: str, fn: Callable[[], T]) -> T:
    started = time.perf_counter()
    out = fn()
    samples.setdefault(name, []).append((time.perf_counter() - started) * 1000)
    return out


def measure(label: str, ex: Executor, root: Path, runs: int, samples: dict[str, list[float]]) -> None:
    print(f"measuring {label} ...", file=sys.stderr, flush=True)
    for i in range(runs):
        logs = root / f"{label}-{i}"
        logs.mkdir(parents=True, exist_ok=True)
        kw = {"log_path": logs / "a.log", "rc_path": logs / "a.rc", "pid_path": logs / "a.pid"}
        h = timed(samples, f"{label}: start (to pid known)",
                  lambda kw=kw, i=i: ex.start(f"ajet_bench_{label}_{i}", LOG_WRITER, cwd=str(root), env={}, **kw))
        assert h.pid is not None
        for _ in range(5):
            time.sleep(0.2)

            def tick(h=h) -> bool:
                ex.sync(h)
                return ex.is_running(h)

            assert timed(samples, f"{label}: one watch tick (sync + is_running)", tick)
        rc = timed(samples, f"{label}: stop (SIGINT enough)", lambda h=h: ex.stop(h, grace=5))
        assert rc == 130, rc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    runs = parser.parse_args().runs
    samples: dict[str, list[float]] = {}
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-ssh-") as tmp:
        base = Path(tmp)
        os.environ["AJET_RUNNER_SSH_CONTROL_DIR"] = str(base / "cm")
        sock = str(base / "tmux.sock")
        try:
            measure("local", TmuxRunner(sock, linger=0), base / "local", runs, samples)
        finally:
            subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)
        with running_sshd(base / "sshd", control_dir=base / "cm") as host:
            os.environ["AJET_RUNNER_SSH_TMUX_SOCKET"] = host.tmux
            floor = SshExecutor(ALIAS, config=str(host.config)).channel
            floor.run("true")  # the master connection, opened once
            for _ in range(20):
                timed(samples, "floor: one multiplexed `ssh HOST bash -s` running `true`", lambda: floor.run("true"))
            measure("ssh, shared disk", SshExecutor(ALIAS, config=str(host.config), linger=0), base / "shared",
                    runs, samples)
        private = base / "hostdisk"
        with running_sshd(base / "sshd2", private_dir=private, control_dir=base / "cm") as host:
            os.environ["AJET_RUNNER_SSH_TMUX_SOCKET"] = host.tmux
            measure("ssh, files fetched", SshExecutor(ALIAS, config=str(host.config), linger=0), private,
                    runs, samples)
    print(f"{runs} runs each; milliseconds; load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    width = max(len(k) for k in samples)
    for name, values in samples.items():
        print(f"  {name:<{width}}  median {statistics.median(values):8.1f}  max {max(values):8.1f}  (n={len(values)})")


if __name__ == "__main__":
    main()
