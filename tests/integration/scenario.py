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


DEMO_YAML = "tests/bench/benchmark_math/benchmark_math.yaml"


def short_sim(sc: Scenario, yaml_rel: str = DEMO_YAML, **sim: float) -> None:
    """The simulated trainer's pace made quicker (its `ajet_sim` block): for a test that needs a run to
    complete, not to last. The demo's 10 steps and 6 evaluations take about 4 s instead of 15 s."""
    pace = {"step_seconds": 0.3, "val_seconds": 0.1, "startup_seconds": 0.3, **sim}
    path = sc.codebase / yaml_rel
    text = path.read_text(encoding="utf-8")
    head, sep, block = text.partition("\najet_sim:\n")
    assert sep, f"{yaml_rel} has no ajet_sim block"
    lines = block.split("\n")
    end = next((i for i, ln in enumerate(lines) if ln and not ln[0].isspace()), len(lines))
    body = [ln for ln in lines[:end] if ln.split(":")[0].strip() not in pace]
    body = [f"  {key}: {value}" for key, value in pace.items()] + body
    path.write_text(head + sep + "\n".join(body + lines[end:]), encoding="utf-8")


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any ajet-runner setting or Redis address: a fresh user's shell
    (then `extra`, e.g. the Redis a test started)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_RUNNER_") and k != "REDIS_URL"}
    return {**env, **extra}


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
    """`ajet-runner run`; `timeout` is for a quiet machine, scaled by the load (tests/load.py)."""
    return subprocess.run([*CLI, "run", str(sc.blueprint)], env=env, capture_output=True, text=True,
                          timeout=scaled(timeout), check=False)


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


def stays_false(cond: Callable[[], object], seconds: float, what: str, interval: float = 0.1) -> None:
    """Fail if `cond()` becomes true within `seconds`. Not scaled by the load (unlike `wait_for`): a
    window the code under test holds for a set time (a hand-back, a drain) must not outgrow it on a busy
    machine, and a shorter look can only miss a wrong start, never invent one."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cond():
            raise AssertionError(f"{what} within {seconds:.0f}s")
        time.sleep(interval)


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
