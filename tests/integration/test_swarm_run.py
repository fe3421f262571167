"""Swarm blueprints through the real `ajet-runner run`: embedded Redis, real tmux, the simulated
swarm server and client."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.integration.scenario import env_for, marked_processes, run_cli, wait_for
from tests.integration.swarm_helpers import free_port, listening, make_swarm

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _pid(path: Path) -> int:
    return int(path.read_text().strip())


def test_swarm_run_starts_the_server_first_and_stops_it(tmp_path: Path, tmux_socket: str) -> None:
    port = free_port()
    sc = make_swarm("swarm", tmp_path, port)
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 1
    assert [e["step"] for e in data["evaluations"]] == [0, 2, 4, 6]
    # the client's pass@k shows as task_pass_rate@k: in the live output, the report and the metrics
    assert "evaluation at step 6: task_pass_rate@1=0.8" in proc.stdout
    assert data["best"]["task_pass_rate@1"] == {"value": 0.8, "step": 6}
    assert "| `task_pass_rate@1` | 0.8000 | 0.8000 | 6 |" in (sc.results / "experiment_report.md").read_text()
    server_log = (sc.results / "logs" / "server-1.log").read_text()
    assert f"Starting swarm server on port {port}" in server_log and "Swarm server stopped." in server_log
    client_log = (sc.results / "logs" / "attempt-1.log").read_text()
    assert "not reachable" not in client_log and f"http://localhost:{port}" in client_log  # AJET_SWARM_URL set
    assert not psutil.pid_exists(_pid(sc.results / "logs" / "server-1.pid"))
    assert not listening(port)
    assert marked_processes(sc.flag()["id"]) == []


def test_swarm_run_reuses_a_running_server_and_leaves_it(tmp_path: Path, tmux_socket: str) -> None:
    port = free_port()
    sc = make_swarm("swarm", tmp_path, port)
    server = subprocess.Popen([sys.executable, "-m", "ajet.swarm_cli", "start", f"--swarm-port={port}"],
                              cwd=sc.codebase, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: listening(port), 30, "the pre-started swarm server")
        proc = run_cli(sc, env_for(tmux_socket))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = sc.results_json()
        assert data["outcome"] == "completed" and len(data["evaluations"]) >= 3
        assert not (sc.results / "logs" / "server-1.log").exists()  # not started again
        assert server.poll() is None and listening(port)  # left running
    finally:
        server.terminate()
        server.wait(10)


def test_swarm_server_dying_mid_run_is_restarted_once(tmp_path: Path, tmux_socket: str) -> None:
    """The server's death is seen directly (the client would wait 60 s before failing) and diagnosed
    from the server's log; the repair restarts the server, awaits it and relaunches the client."""
    port = free_port()
    sc = make_swarm("swarm_server_dies", tmp_path, port)
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 2
    first, second = data["attempts"]
    assert "the swarm server died while the client ran" in first["end_reason"]
    assert first["ended_at"] - first["started_at"] < 40  # not the client's own 60 s retry
    (repair,) = data["repairs"]
    assert repair["signature"] == "swarm_server_died" and repair["result"] == "relaunched"
    assert "Engine crashed" in repair["explanation"] and "Engine crashed" in repair["log_excerpt"]
    assert "server-1.log" in repair["log_excerpt"]
    assert "Engine crashed" in (sc.results / "logs" / "server-1.log").read_text()
    server_2 = (sc.results / "logs" / "server-2.log").read_text()
    assert f"Starting swarm server on port {port}" in server_2 and "Swarm server stopped." in server_2
    client_2 = (sc.results / "logs" / "attempt-2.log").read_text()
    assert "not reachable" not in client_2  # relaunched only once the new server listened
    assert [h["what"] for h in data["swarm"]["history"]] == ["started", "stopped", "restarted", "stopped"]
    log = (sc.results / "repair_log.md").read_text()
    assert "## Swarm server" in log and "swarm_server_died" in log
    assert "restart this experiment's swarm server" in log
    assert "swarm server restarted in tmux session" in log and "server-2.log" in log
    assert not psutil.pid_exists(_pid(sc.results / "logs" / "server-2.pid")) and not listening(port)
    assert marked_processes(sc.flag()["id"]) == []


def test_val_before_train_in_swarm_mode_is_a_diagnosed_failure(tmp_path: Path, tmux_socket: str) -> None:
    port = free_port()
    sc = make_swarm("swarm_val_before_train", tmp_path, port)
    run_cli(sc, env_for(tmux_socket))
    data = sc.results_json()
    assert data["outcome"] == "failed" and len(data["attempts"]) == 1
    assert [r["signature"] for r in data["repairs"]] == ["swarm_val_before_train"]
    assert not listening(port)


def test_a_reused_server_that_dies_is_replaced_by_one_of_ours(tmp_path: Path, tmux_socket: str) -> None:
    """A reused server is watched by its port; when it goes, the repair starts (and later stops) our own."""
    port = free_port()
    sc = make_swarm("swarm", tmp_path, port)
    env = {**os.environ, "AJET_SIM_SWARM_DIE_AFTER": "2"}
    server = subprocess.Popen([sys.executable, "-m", "ajet.swarm_cli", "start", f"--swarm-port={port}"],
                              cwd=sc.codebase, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: listening(port), 30, "the pre-started swarm server")
        proc = run_cli(sc, env_for(tmux_socket))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = sc.results_json()
        assert data["outcome"] == "completed" and len(data["attempts"]) == 2
        (repair,) = data["repairs"]
        assert repair["signature"] == "swarm_server_died" and f"nothing listens on port {port}" in repair["explanation"]
        assert [h["what"] for h in data["swarm"]["history"]] == ["reused", "restarted", "stopped"]
        assert not (sc.results / "logs" / "server-1.log").exists()  # attempt 1 reused the outside server
        assert "Starting swarm server" in (sc.results / "logs" / "server-2.log").read_text()
        assert server.wait(10) != 0 and not listening(port)
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(10)


def test_a_server_that_refuses_to_boot_is_diagnosed_from_its_log(tmp_path: Path, tmux_socket: str) -> None:
    """`Please enable_swarm_mode in config` in the server's log: not repairable, the client never starts."""
    port = free_port()
    sc = make_swarm("swarm", tmp_path, port)
    text = sc.blueprint.read_text()
    conf = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"  # no ajet.enable_swarm_mode
    sc.blueprint.write_text(text.replace(f"--swarm-port={port}", f"--swarm-port={port} --conf {conf}"))
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode != 0
    data = sc.results_json()
    assert data["outcome"] == "failed"
    (repair,) = data["repairs"]
    assert repair["signature"] == "swarm_mode_disabled" and repair["result"] == "not repairable"
    assert "Please enable_swarm_mode in config" in repair["log_excerpt"]
    assert "swarm_mode_disabled" in (sc.results / "repair_log.md").read_text()
    assert not list((sc.results / "logs").glob("attempt-*.log"))  # the client was never launched
    assert not listening(port)


def test_an_engine_state_error_in_the_server_log_explains_a_bare_client_failure(tmp_path: Path,
                                                                              tmux_socket: str) -> None:
    """The client only says `ValueError: Internal Server Error`; the live server's log says why."""
    port = free_port()
    sc = make_swarm("swarm_engine_stuck", tmp_path, port)
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 2
    (repair,) = data["repairs"]
    assert repair["signature"] == "swarm_engine_state" and repair["result"] == "relaunched"
    assert "ENGINE.CANNOT_CONNECT" in repair["log_excerpt"] and "server-1.log" in repair["log_excerpt"]
    assert "Cannot sync" not in (sc.results / "logs" / "attempt-1.log").read_text()  # only the server said it
    assert [h["what"] for h in data["swarm"]["history"]] == ["started", "stopped", "restarted", "stopped"]
    assert [e["step"] for e in data["evaluations"]] == [0, 2, 4, 6]
    assert not listening(port)


@pytest.mark.parametrize("reuse", [False, True])
def test_time_limit_stops_the_client_and_only_our_server(tmp_path: Path, tmux_socket: str, reuse: bool) -> None:
    port = free_port()
    sc = make_swarm("swarm", tmp_path, port)
    text = sc.blueprint.read_text().replace("SWARM_STEPS=6 ", "SWARM_STEPS=200 ")
    sc.blueprint.write_text(text.replace("## [exp_max_time]\n5 minutes", "## [exp_max_time]\n8 seconds"))
    outside = None
    if reuse:
        outside = subprocess.Popen([sys.executable, "-m", "ajet.swarm_cli", "start", f"--swarm-port={port}"],
                                   cwd=sc.codebase, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for(lambda: listening(port), 30, "the pre-started swarm server")
    try:
        proc = run_cli(sc, env_for(tmux_socket, AJET_RUNNER_TIME_LIMIT_GRACE_SECONDS="3"))
        data = sc.results_json()
        assert data["outcome"] != "completed", proc.stdout
        assert "max time of 8s reached" in data["attempts"][0]["end_reason"], data["attempts"]
        assert marked_processes(sc.flag()["id"]) == []
        if reuse:
            assert outside is not None and outside.poll() is None and listening(port)  # left alone
            assert [h["what"] for h in data["swarm"]["history"]] == ["reused"]
        else:
            assert [h["what"] for h in data["swarm"]["history"]] == ["started", "stopped"]
            assert not psutil.pid_exists(_pid(sc.results / "logs" / "server-1.pid")) and not listening(port)
    finally:
        if outside is not None:
            outside.terminate()
            outside.wait(10)
