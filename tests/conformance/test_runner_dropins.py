"""The research workflow's drop-ins with `--runner`, on the REAL AgentJet 0.0.1 launcher.

The skills' `python -m alpha_auto_research.blueprint_runner.… --runner=${runner}` lines, rewritten by
docs/research-workflow.md's `sed` block, are run with bash against a real `ajet-runner serve` and a
real worker whose experiments are `python -m ajet.launcher` under the conformance stand-ins: one run
is stopped while it trains (`Stopping job …`, outcome `cancelled`), the next one completes with every
evaluation the trainer printed, and is then deleted (`Deleted job …`).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import time

import pytest

from tests.conformance import harness
from tests.conformance.test_runner_console import (
    FULL_TIER,
    VALIDATION_ROW,
    Figure,
    blueprint,
    figures,
    steps_of,
    write_yaml,
)
from tests.integration.scenario import wait_for
from tests.integration.test_api import running_server
from tests.integration.test_cli_client import cli_env
from tests.integration.test_research_workflow import BIN, SKILL_LINES, command_of, migrate
from tests.integration.workers import running_worker

pytestmark = [pytest.mark.conformance, pytest.mark.slow, pytest.mark.integration, FULL_TIER]


def bash(env: dict[str, str], command: str, **values: str) -> subprocess.CompletedProcess[str]:
    for key, value in values.items():
        command = command.replace(key, value)
    return subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60,
                          check=False)


def test_the_skills_commands_with_runner_drive_real_launcher_runs(codebase, make_env, redis_url, tmux_socket,
                                                                  tmp_path, pytestconfig) -> None:
    submit, _, scan, stop, _ = (command_of(line) for line in migrate(SKILL_LINES[:5], tmp_path / "skill"))
    slow_conf = write_yaml(codebase, "slow.yaml", total_epochs=10, conformance={"step_seconds": 3})
    slow, slow_results = blueprint(tmp_path, codebase, slow_conf, name="slow.md",
                                   purpose="Conformance drop-ins: a 20-step run that is stopped while it trains.")
    ok, ok_results = blueprint(tmp_path, codebase, codebase / "minimal.yaml", name="ok.md",
                               purpose="Conformance drop-ins: 6 steps that complete.")
    env = make_env()
    node_env = {**env, "REDIS_URL": redis_url, "AJET_RUNNER_TMUX_SOCKET": tmux_socket,
                "AJET_RUNNER_LEASE_SECONDS": "5", "AJET_RUNNER_POLL_INTERVAL": "0.2",
                "AJET_RUNNER_STOP_GRACE_SECONDS": "10"}
    start = time.monotonic()
    with running_server(redis_url, tmp_path / "serve.log") as server, \
            running_worker(node_env, "conformance-node"):  # 1 GPU from the fake nvidia-smi: one run at a time
        agent = {**cli_env(server.url), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        with server.client() as api:
            wait_for(api.nodes, 30, "the worker to register")

        ids = []
        for path in (slow, ok):
            out = bash(agent, submit, **{"${runner}": "ssh", "${path_to_blue_print}": str(path),
                                         "${MAX_PARALLEL_BLUEPRINTS}": "2"})
            assert out.returncode == 0 and re.fullmatch(r"Job submitted: \w{12}\n", out.stdout), out.stderr
            assert "note: --runner=ssh is ignored" in out.stderr
            ids.append(out.stdout.split(": ")[1].strip())
        slow_id, ok_id = ids

        def status() -> dict[str, str]:
            out = bash(agent, scan, **{"${runner}": "ssh"})
            assert out.returncode == 0, out.stderr
            return {row["job_id"]: row["status"] for row in map(ast.literal_eval, out.stdout.splitlines())}

        first = wait_for(lambda: (s := status()).get(slow_id) == "Running" and s, 60, "the slow run to start")
        assert first[ok_id] == "Queuing"  # one GPU slot: it waits
        log = slow_results / "logs" / "attempt-1.log"
        wait_for(lambda: log.exists() and "step:1 - " in log.read_text(errors="replace"), 120,
                 "the slow run's first training step")
        out = bash(agent, stop, **{"${runner}": "ssh", "<job_id>": slow_id})
        assert (out.returncode, out.stdout) == (0, f"Stopping job {slow_id} ...\n"), out.stderr
        wait_for(lambda: (slow_results / "finish.flag").exists(), 90, "the stopped run's finish.flag")
        assert json.loads((slow_results / "finish.flag").read_text())["outcome"] == "cancelled"
        stopped = json.loads((slow_results / "results.json").read_text())
        assert [e["step"] for e in stopped["evaluations"]][:2] == [0, 1]  # what it printed before the stop

        wait_for(lambda: (ok_results / "finish.flag").exists(), 180, "the second run's finish.flag")
        final = status()
        assert final[slow_id] == "Stopped" and final[ok_id] == "Succeeded"
        doc = json.loads((ok_results / "results.json").read_text())
        printed = steps_of(VALIDATION_ROW, harness.console_lines(
            (ok_results / "logs" / "attempt-1.log").read_text(errors="replace")))
        kept = [e["step"] for e in doc["evaluations"]]
        assert kept == printed == list(range(7)) and doc["outcome"] == "completed"

        out = bash(agent, stop + " --delete", **{"${runner}": "ssh", "<job_id>": ok_id})
        assert out.returncode == 0 and out.stdout.splitlines() == [f"Stopping job {ok_id} ...", f"Deleted job {ok_id}"]
        assert ok_id not in status()
    figures(pytestconfig).rows.append(Figure("drop-ins --runner=ssh: stop one, complete one", doc["outcome"],
                                             len(kept), len(printed), doc["train_steps"],
                                             time.monotonic() - start))
