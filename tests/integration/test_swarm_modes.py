"""Swarm blueprints through the real `ajet-runner run`, beyond the basic case: results found without
`[exp_val_result_path]` (only what grew after launch counts), and swarm mode declared by the YAML
alone (`ajet.enable_swarm_mode: true`, no `[exp_swarm_server]` part)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pytest

from tests.integration.scenario import env_for, marked_processes, run_cli
from tests.integration.swarm_helpers import free_port, listening, make_swarm

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EARLIER = "".join(f"## Step {s}\n- dataset: appworld_dev\n- pass@1: 99.00%\n- pass@4: 99.50%\n\n" for s in (0, 2, 8))


def test_results_found_without_a_named_file_count_only_what_grew_after_launch(tmp_path: Path,
                                                                            tmux_socket: str) -> None:
    port = free_port()
    sc = make_swarm("swarm_found_results", tmp_path, port)
    folder = sc.codebase / "appworld_swarm_results"
    folder.mkdir()
    (folder / "val_results.md").write_text(EARLIER)  # an earlier run's blocks: the client appends after them
    (folder / "older_run.md").write_text(EARLIER)  # untouched by this run: never counted
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed"
    evals = data["evaluations"]
    assert [e["step"] for e in evals] == [0, 2, 4, 6]  # not step 8, which only the earlier run wrote
    assert evals[0]["metrics"]["pass@1"] == pytest.approx(0.2)  # this run's, not the earlier 99 %
    assert evals[0]["metrics"]["task_pass_rate@1"] == pytest.approx(0.2)
    assert "val_results.md" in data["results_source"] and "older_run.md" not in data["results_source"]
    assert f"after its first {len(EARLIER)} bytes" in data["results_source"]
    assert "task_pass_rate@1" in (sc.results / "experiment_report.md").read_text()


def test_results_written_under_the_result_dir_are_found(tmp_path: Path, tmux_socket: str) -> None:
    port = free_port()
    sc = make_swarm("swarm_found_results", tmp_path, port)
    out = sc.results / "client_out"
    text = sc.blueprint.read_text().replace("SWARM_STEPS=6", f"APPWORLD_RESULT_DIR={out} SWARM_STEPS=6")
    sc.blueprint.write_text(text)
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert [e["step"] for e in data["evaluations"]] == [0, 2, 4, 6]
    assert str(out / "val_results.md") in data["results_source"]
    assert not (sc.codebase / "appworld_swarm_results").exists()


def test_yaml_enable_swarm_mode_alone_runs_as_a_swarm_experiment(tmp_path: Path, tmux_socket: str) -> None:
    port = free_port()
    sc = make_swarm("swarm_yaml", tmp_path, port)
    # The defaulted server command calls `ajet-swarm`: the simulated one lives in the codebase's bin/.
    env = env_for(tmux_socket, PATH=f"{sc.codebase / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = run_cli(sc, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 1
    assert [e["step"] for e in data["evaluations"]] == [0, 2, 4, 6]
    server_log = (sc.results / "logs" / "server-1.log").read_text()
    assert f"Starting swarm server on port {port}" in server_log and "Swarm server stopped." in server_log
    assert not (sc.results / "config.patched.yaml").exists()  # the server reads the YAML as written
    assert not psutil.pid_exists(int((sc.results / "logs" / "server-1.pid").read_text()))
    assert not listening(port)
    assert marked_processes(sc.flag()["id"]) == []
