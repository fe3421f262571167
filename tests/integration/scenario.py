"""Helpers for end-to-end scenarios: materialise a sample blueprint, run the real CLI, read results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from ajet_runner.service.demo import materialize
from tests.load import scaled

CLI = [sys.executable, "-m", "ajet_runner"]


@dataclass
class Scenario:
    workdir: Path
    blueprint: Path

    @property
    def results(self) -> Path:
        return self.workdir / "results"

    @property
    def codebase(self) -> Path:
        return self.workdir / "codebase"

    def flag(self) -> dict:
        return json.loads((self.results / "finish.flag").read_text())

    def results_json(self) -> dict:
        return json.loads((self.results / "results.json").read_text())


def make(template: str, tmp_path: Path) -> Scenario:
    workdir = tmp_path / template
    return Scenario(workdir, materialize(template, workdir))


def env_for(tmux_socket: str, **overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    env.update({
        "AJET_RUNNER_TMUX_SOCKET": tmux_socket,
        "AJET_RUNNER_STOP_GRACE_SECONDS": "5",
        "AJET_RUNNER_TIME_LIMIT_GRACE_SECONDS": "10",
        "AJET_RUNNER_POLL_INTERVAL": "0.2",
    })
    env.update(overrides)
    return env


def run_cli(sc: Scenario, env: dict[str, str], timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "run", str(sc.blueprint)], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)


def wait_for(cond: Callable[[], object], timeout: float, what: str, interval: float = 0.1) -> object:
    """`cond()`'s first true value; `timeout` is for a quiet machine, scaled by the load (tests/load.py)."""
    timeout = scaled(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def marked_processes(exp_id: str) -> list[int]:
    """Live processes that carry this experiment's environment marker."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("AJET_RUNNER_EXPERIMENT") == exp_id and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found
