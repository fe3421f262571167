"""`ajet-runner run` end to end: the job sees the user's shell, not a busy tmux server's old environment, and
none of the control plane's keys (issues 36 and 37). Real CLI, embedded Redis, tmux on a private socket."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.scenario import DEMO_YAML, env_for, make, run_cli, short_sim

pytestmark = pytest.mark.integration

TOKEN = "tok-control-plane-0123456789"
WEBHOOK = "whsec-control-plane-abcdef"


def test_a_run_sees_the_shell_and_none_of_the_control_plane(tmp_path: Path, tmux_socket: str) -> None:
    sc = make("demo", tmp_path)
    short_sim(sc)  # the run's environment is tested, not its pace
    dump = sc.workdir / "env.json"
    text = sc.blueprint.read_text()
    launcher = next(line for line in text.splitlines() if "-m ajet.launcher" in line)
    python = launcher.split()[0]
    dumper = f"{python} -c \"import json,os; json.dump(dict(os.environ), open('{dump}', 'w'))\""
    sc.blueprint.write_text(text.replace(launcher, f"{dumper}\n{launcher}"))
    # The logger needs SWANLAB_API_KEY (the simulated launcher fails at start without it, as 0.0.1 does): the
    # preflight's credential check and the job's environment must agree that it is set.
    conf = sc.codebase / DEMO_YAML
    conf.write_text(conf.read_text(encoding="utf-8").replace("logger: tensorboard", "logger: swanlab"),
                    encoding="utf-8")
    # The tmux server is up before the shell exported its keys (a finished pane keeps it alive for 300 s).
    subprocess.run(["tmux", "-S", tmux_socket, "new-session", "-d", "-s", "ajet_keeper", "sleep 600"],
                   env={**os.environ, "STALE_ONLY": "old"}, check=True, timeout=10)
    env = env_for(tmux_socket, SWANLAB_API_KEY="user-swanlab-key", HF_ENDPOINT="https://hf-mirror.example",
                  AJET_RUNNER_TOKEN=TOKEN, AJET_RUNNER_WEBHOOK_SECRET=WEBHOOK, MY_COPY=f"Bearer {TOKEN}")
    done = run_cli(sc, env, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads(dump.read_text())
    assert seen["SWANLAB_API_KEY"] == "user-swanlab-key" and seen["HF_ENDPOINT"] == "https://hf-mirror.example"
    assert "STALE_ONLY" not in seen
    leaked = {k: v for k, v in seen.items() if k == "REDIS_URL" or (k.startswith("AJET_RUNNER_")
              and k != "AJET_RUNNER_EXPERIMENT") or TOKEN in v or WEBHOOK in v or "redis://" in v or "unix://" in v}
    assert leaked == {}
    report = (sc.results / "experiment_report.md").read_text()
    assert "Environment (variable names the job started with)" in report
    assert "SWANLAB_API_KEY" in report and "user-swanlab-key" not in report
    assert "held back (the control plane's)" in report and "AJET_RUNNER_TOKEN" in report and TOKEN not in report
    assert "| Ran on | local executor, driven by the worker on node " in report
    doc = sc.results_json()
    [attempt] = doc["attempts"]  # the launcher's credential check passed first time: nothing to repair
    assert "SWANLAB_API_KEY" in attempt["env_names"] and "MY_COPY" in attempt["env_withheld"]
    assert doc["outcome"] == "completed" and doc["repairs"] == []
    decisions = {d["variable"]: d for d in doc["preflight_env"]["decisions"]}
    assert decisions["SWANLAB_API_KEY"]["is_set"] and "logger swanlab kept" in decisions["SWANLAB_API_KEY"][
        "decision"], decisions
    assert "ajet.trainer_common.logger" not in {c["key"] for c in doc["preflight_changes"]}
    assert "SWANLAB_API_KEY is not set" not in report
