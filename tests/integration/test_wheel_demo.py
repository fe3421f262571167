"""`pip install ajet-runner && ajet-runner demo` works anywhere: the wheel carries the sample codebase and
blueprints, under one import package. Builds the wheel, installs it into a fresh venv outside the checkout
beside PyPI's `python-statemachine` (whose import name, `statemachine`, we once shipped too), imports both
and runs `demo` there."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.soak]


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def test_demo_runs_from_a_wheel_in_a_fresh_venv(tmp_path: Path) -> None:
    # From the tracked files only, as a clean clone has them: a checkout's own build/ (setuptools' build/lib of
    # an earlier layout, the conformance venvs) must not leak into the wheel.
    source = tmp_path / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    source.mkdir()
    subprocess.run(["tar", "-cf", str(tmp_path / "source.tar"), "--null", "-T", "-"], cwd=REPO, input=tracked,
                   check=True)
    subprocess.run(["tar", "-xf", str(tmp_path / "source.tar")], cwd=source, check=True)
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dist), str(source)], cwd=tmp_path)
    wheel = next(dist.glob("ajet_runner-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {"ajet_runner", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "ajet_runner/examples/blueprints/demo.md" in names
    assert "ajet_runner/examples/agentjet_sim/ajet/launcher.py" in names
    assert "ajet_runner/py.typed" in names and "ajet_runner/store/transition.lua" in names

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    # [node]: a node draws the reports' plots (a client-only install leaves the plotting stack out)
    run([str(venv / "bin" / "pip"), "install", "-q", "python-statemachine", f"{wheel}[node]"], cwd=tmp_path,
        timeout=900)
    both = ("from statemachine import StateMachine\n"
            "from ajet_runner.client import AjetRunnerClient\n"
            "import ajet_runner.statemachine.lifecycle\n"
            "print(StateMachine.__module__, AjetRunnerClient.__module__)")
    assert run([str(venv / "bin" / "python"), "-c", both], cwd=tmp_path).split() == [
        "statemachine.statemachine", "ajet_runner.service.client.api_client"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PYTHONPATH", "VIRTUAL_ENV")}
    env["AJET_RUNNER_TMUX_SOCKET"] = str(tmp_path / "tmux.sock")
    try:
        out = run([str(venv / "bin" / "ajet-runner"), "demo", "--dir", str(elsewhere / "run")], cwd=elsewhere,
                  env=env, timeout=300)
    finally:
        subprocess.run(["tmux", "-S", env["AJET_RUNNER_TMUX_SOCKET"], "kill-server"], capture_output=True,
                       check=False)
    assert "completed" in out.lower()
    flags = list((elsewhere / "run").rglob("finish.flag"))
    assert len(flags) == 1 and '"completed"' in flags[0].read_text()
