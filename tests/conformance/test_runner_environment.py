"""The job's environment on the REAL AgentJet 0.0.1 launcher (issue 36): the shell's variables reach the
run even when the runner's tmux server is already up with an older environment.

The fake nvidia-smi reads its GPUs from AJET_CONF_GPUS. The tmux server is started first with a busy GPU
in its environment; the shell that runs `ajet-runner run` has a free one. The launcher (its `--autokill`
removed, it checks every GPU) passes its check only if the job sees the shell's value.
"""

from __future__ import annotations

import subprocess

import pytest

from tests.conformance.test_runner_console import FULL_TIER, blueprint, run_blueprint, runner_env, write_yaml

pytestmark = [pytest.mark.conformance, pytest.mark.slow, pytest.mark.integration, FULL_TIER]


def test_the_shell_environment_wins_over_a_busy_tmux_server(codebase, make_env, tmux_socket, tmp_path) -> None:
    conf = write_yaml(codebase, "env.yaml")
    path, results = blueprint(tmp_path, codebase, conf, purpose="Conformance: the shell's environment, a busy tmux "
                              "server.", command=f"python -m ajet.launcher --conf {conf} --backbone verl --autokill")
    env = runner_env(make_env(gpus="0:81920:0"), tmux_socket, SWANLAB_API_KEY="shell-only-key")
    stale = {**env, "AJET_CONF_GPUS": "0:81920:80000"}  # what the shell had when the server started
    stale.pop("SWANLAB_API_KEY")
    subprocess.run(["tmux", "-S", tmux_socket, "new-session", "-d", "-s", "ajet_keeper", "sleep 900"], env=stale,
                   check=True, timeout=10)
    run = run_blueprint(path, results, env)
    assert run.proc.returncode == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    assert run.flag["outcome"] == "completed", run.report[-3000:]
    assert len(run.doc["attempts"]) == 1, "the first attempt ran with the shell's GPUs: nothing to repair"
    assert "SWANLAB_API_KEY" in run.doc["attempts"][0]["env_names"]
    assert "shell-only-key" not in run.report
