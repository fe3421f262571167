"""Shared set-up for the end-to-end benches: an embedded Redis, a real worker, blueprints whose
launch command is any shell script, and small statistics. Every bench prints its figure next to
a floor measured in the same run, and the ratio."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil

from ajet_runner.service.demo import materialize
from ajet_runner.service.embedded import EmbeddedRedis
from ajet_runner.store.store import Store

with contextlib.suppress(OSError):
    os.nice(10)  # the machine is shared: benches never outrank real work


def wait(cond: Callable[[], Any], timeout: float, what: str = "a condition", interval: float = 0.01) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def pct(xs: list[float], q: float) -> float:
    """The q-quantile (nearest rank): with few samples p95 is the maximum."""
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered) + 0.5) - 1))]


def line(label: str, ours: list[float], floor: list[float], unit: str = "ms", scale: float = 1000.0) -> str:
    """`label: ours median / p95 | floor median / p95 | ratio of medians`."""
    om, op = statistics.median(ours) * scale, pct(ours, 0.95) * scale
    fm, fp = statistics.median(floor) * scale, pct(floor, 0.95) * scale
    ratio = om / fm if fm > 0 else float("inf")
    return (f"{label:<34} ours median {om:8.1f} {unit} p95 {op:8.1f} {unit} | floor median {fm:8.1f} {unit} "
            f"p95 {fp:8.1f} {unit} | ratio {ratio:6.1f}x")


def blueprint(workdir: Path, script: str, max_time: str = "10 minutes") -> Path:
    """The demo blueprint with `script` (bash) as its launch command."""
    bp = materialize("demo", workdir)
    text = bp.read_text()
    text = re.sub(r"```bash\n.*?\n```", lambda _m: f"```bash\n{script.strip()}\n```", text, flags=re.S)
    text = re.sub(r"## \[exp_max_time\]\n.*?\n", f"## [exp_max_time]\n{max_time}\n", text)
    bp.write_text(text)
    return bp


class Cluster:
    """An embedded Redis, a scratch dir and worker processes started on demand."""

    def __init__(self, **env: str) -> None:
        self.work = Path(tempfile.mkdtemp(prefix="ajet-bench-"))
        self.sock = str(self.work / "tmux.sock")
        self._redis = EmbeddedRedis()
        self.extra = env
        self.workers: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Cluster:
        self._redis.__enter__()
        self.url = self._redis.url
        self.store = Store.from_url(self.url)
        self.env = {**os.environ, "REDIS_URL": self.url, "AJET_RUNNER_TMUX_SOCKET": self.sock,
                    "AJET_RUNNER_STOP_GRACE_SECONDS": "5", **self.extra}
        return self

    def __exit__(self, *exc: object) -> None:
        for w in self.workers:
            self.kill(w, signal.SIGTERM)
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, check=False)
        self._redis.__exit__(*exc)
        subprocess.run(["rm", "-rf", str(self.work)], check=False)

    def worker(self, node: str = "bench", slots: int = 1) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen([sys.executable, "-m", "cli", "worker", "--node", node, "--gpus", "0",
                                 "--slots", str(slots)], env=self.env, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.workers.append(proc)
        return proc

    def kill(self, proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
        """The worker and its watcher; the runs in tmux live on."""
        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            tree = []
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        for p in tree:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        psutil.wait_procs(tree, timeout=10)

    def state(self, exp_id: str) -> str:
        return str((self.store.records.raw(exp_id) or {}).get("state") or "")

    def transition_at(self, exp_id: str, dest: str) -> float | None:
        for e in self.store.events.read(exp_id):
            if e.get("type") == "transition" and e.get("to") == dest:
                return float(e["at"])
        return None


@contextlib.contextmanager
def cluster(**env: str) -> Iterator[Cluster]:
    with Cluster(**env) as c:
        yield c
