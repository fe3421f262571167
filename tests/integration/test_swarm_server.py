"""The swarm-server lifecycle against a real tmux server (private socket) and the simulated
AgentJet swarm server and client: start and await, reuse, stop with nothing left, failures."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import psutil
import pytest

from ajet_runner.service.demo import materialize
from ajet_runner.statemachine.blueprint.parse import parse_blueprint
from ajet_runner.statemachine.blueprint.swarm_blueprint import swarm_spec
from ajet_runner.workers.executors.local.tmux import TmuxRunner
from ajet_runner.workers.swarm.server import (
    SwarmServerFailed,
    client_env,
    ensure_server,
    port_listening,
    server_session,
)
from tests.integration.swarm_helpers import free_port


@pytest.fixture()
def runner(tmux_socket: str) -> TmuxRunner:
    return TmuxRunner(linger=0)


def _env() -> dict[str, str]:
    return {"PYTHONUNBUFFERED": "1"}


def test_start_await_client_and_stop(runner: TmuxRunner, tmp_path: Path) -> None:
    port = free_port()
    bp = parse_blueprint(materialize("swarm", tmp_path, python=sys.executable, swarm_port=port).read_text())
    spec = swarm_spec(bp)
    assert spec is not None and spec.port == port
    logs = tmp_path / "logs"
    server = ensure_server(runner, spec, purpose=bp.exp_purpose, exp_id="abc123def", cwd=bp.exp_codebase_dir,
                           env=_env(), log_dir=logs, n=1, boot_timeout=30)
    assert not server.reused and server.handle is not None
    assert server.handle.session == server_session(bp.exp_purpose, "abc123def")
    assert "ajet" in server.handle.session and "swarm" in server.handle.session
    assert port_listening(port) and "Starting swarm server on port" in (logs / "server-1.log").read_text()
    env = client_env(spec, bp.exp_launch_command, _env())
    assert env["AJET_SWARM_URL"] == f"http://localhost:{port}"
    client = runner.start("ajet_client_test", bp.exp_launch_command, cwd=bp.exp_codebase_dir, env=env,
                          log_path=logs / "attempt-1.log", rc_path=logs / "attempt-1.rc",
                          pid_path=logs / "attempt-1.pid")
    assert runner.wait_for_exit(client, 60) == 0
    assert "[INFO] Training complete." in (logs / "attempt-1.log").read_text()
    results = Path(bp.exp_codebase_dir, "appworld_swarm_results", "val_results.md").read_text()
    assert results.count("## Step ") == 4
    assert server.alive(runner)  # the server keeps running after the client
    pids = [server.handle.pid]
    server.stop(runner, grace=10)
    assert not port_listening(port)
    assert all(not psutil.pid_exists(p) for p in pids if p)


def test_listening_server_is_reused_and_left_running(runner: TmuxRunner, tmp_path: Path) -> None:
    port = free_port()
    bp = parse_blueprint(materialize("swarm", tmp_path, python=sys.executable, swarm_port=port).read_text())
    spec = swarm_spec(bp)
    assert spec is not None
    first = ensure_server(runner, spec, purpose="other", exp_id="111111", cwd=bp.exp_codebase_dir, env=_env(),
                          log_dir=tmp_path / "l1", n=1, boot_timeout=30)
    second = ensure_server(runner, spec, purpose=bp.exp_purpose, exp_id="222222", cwd=bp.exp_codebase_dir,
                           env=_env(), log_dir=tmp_path / "l2", n=1, boot_timeout=30)
    assert second.reused and second.handle is None and not (tmp_path / "l2" / "server-1.log").exists()
    assert second.stop(runner) is None and port_listening(port)
    first.stop(runner, grace=10)
    assert not port_listening(port)


def test_server_that_exits_before_listening_is_a_failure(runner: TmuxRunner, tmp_path: Path) -> None:
    port = free_port()
    bp = parse_blueprint(materialize("swarm", tmp_path, python=sys.executable, swarm_port=port).read_text())
    (tmp_path / "no_swarm.yaml").write_text("ajet:\n  x: 1\n")
    spec = swarm_spec(bp)
    assert spec is not None
    spec = spec.model_copy(update={"server_command": f"{spec.server_command} --conf {tmp_path}/no_swarm.yaml"})
    with pytest.raises(SwarmServerFailed, match="exited") as info:
        ensure_server(runner, spec, purpose="p", exp_id="333333", cwd=bp.exp_codebase_dir, env=_env(),
                      log_dir=tmp_path / "logs", n=1, boot_timeout=30)
    assert info.value.log_path is not None
    assert "Please enable_swarm_mode in config" in info.value.log_path.read_text()


def test_port_held_by_a_non_http_listener_is_refused(runner: TmuxRunner, tmp_path: Path) -> None:
    bp = parse_blueprint(materialize("swarm", tmp_path, python=sys.executable).read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        spec = swarm_spec(bp)
        assert spec is not None
        spec = spec.model_copy(update={"port": port})
        with pytest.raises(SwarmServerFailed, match="does not answer HTTP"):
            ensure_server(runner, spec, purpose="p", exp_id="444444", cwd=bp.exp_codebase_dir, env=_env(),
                          log_dir=tmp_path / "logs", n=1, boot_timeout=5)
    assert not (tmp_path / "logs" / "server-1.log").exists()
