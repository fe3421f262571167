"""Swarm mode under the conformance tier: agentjet 0.0.1 has no swarm server, the stand-in does.

The stand-in server uses the real 0.0.1 config loader and verl console logger; its client
writes the `## Step N` blocks and prints `[INFO] Training complete.` (see ajet_conformance).
"""

from __future__ import annotations

import socket
import subprocess
import time

import pytest

from tests.conformance import harness

# The first test may build the conformance venv (about a minute warm, longer on a cold pip cache).
pytestmark = [pytest.mark.conformance, pytest.mark.slow, pytest.mark.timeout(1200)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path, text: str, proc: subprocess.Popen, deadline_s: float = 120) -> str:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        content = path.read_text() if path.exists() else ""
        if text in content:
            return content
        assert proc.poll() is None, f"server exited {proc.returncode}:\n{content[-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"{text!r} not printed within {deadline_s} s:\n{content[-3000:]}")


def test_0_0_1_has_no_swarm_cli(codebase, make_env, conf_python):
    env = make_env(extra={"AJET_CONF_REDIRECT": "0"})
    res = subprocess.run([conf_python, "-m", "ajet.swarm_cli", "start"], cwd=codebase, env=env,
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 1
    assert "No module named ajet.swarm_cli" in res.stderr


def test_swarm_server_and_client_standins(codebase, make_env):
    port = _free_port()
    env = make_env()
    log = codebase / "server.log"
    with open(log, "w") as out:
        server = subprocess.Popen(["ajet-swarm", "start", f"--swarm-port={port}"], cwd=codebase, env=env,
                                  stdout=out, stderr=subprocess.STDOUT)
    try:
        content = _wait_for(log, f"Starting swarm server on port {port}", server)
        assert "Experiment Name: ajet_swarm_default_" in content
        client_env = dict(env, AJET_SWARM_URL=f"http://127.0.0.1:{port}", APPWORLD_EVAL_INTERVAL="3",
                          APPWORLD_TOTAL_TRAINING_STEPS="7", APPWORLD_RESULT_DIR="./swarm_results")
        res = subprocess.run([harness.venv_python(), "-m", "tutorial.example_appworld_swarm.agent_roll"],
                             cwd=codebase, env=client_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True, timeout=180, check=False)
        assert res.returncode == 0, res.stdout[-3000:]
        assert res.stdout.rstrip().splitlines()[-1] == "[INFO] Training complete."
        md = (codebase / "swarm_results" / "val_results.md").read_text()
        assert [int(line.split()[2]) for line in md.splitlines() if line.startswith("## Step ")] == [0, 3, 6]
        assert "- task_pass_rate@1: " in md and md.count("%") >= 6
        server_lines = harness.console_lines(_wait_for(log, "step:7 - ", server))
        steps = [line for line in server_lines if line.startswith("step:")]
        assert [int(line.split(" ")[0].split(":")[1]) for line in steps] == list(range(1, 8))
        assert all(" - actor/kl_loss:" in line for line in steps)
        assert server.poll() is None  # the server keeps running after its client is done
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_swarm_client_gives_up_on_a_dead_server(codebase, make_env, conf_python):
    env = make_env(extra={"AJET_CONF_SWARM_RETRY_S": "0.2"})
    env["AJET_SWARM_URL"] = f"http://127.0.0.1:{_free_port()}"
    res = subprocess.run([conf_python, "-m", "tutorial.example_appworld_swarm.agent_roll"], cwd=codebase, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120, check=False)
    assert res.returncode == 1
    assert res.stdout.rstrip().splitlines()[-1] == "Unable to connect to swarm server."
    assert "retrying in 0.2 s" in res.stdout
