"""Bad swarm blueprints through the real `ajet-runner run`: an empty server command, a port that is
no number, a port held by something that does not answer HTTP. Each is a clear problem naming
the field; nothing is launched (no server log, no client log, no tmux session); the result dir
gets a report and `finish.flag` as for any rejected blueprint."""

from __future__ import annotations

import re
import socket
import subprocess
from pathlib import Path

import pytest

from ajet_runner.service.demo import materialize
from tests.integration.scenario import Scenario, env_for, run_cli
from tests.integration.swarm_helpers import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVER_PART = re.compile(r"## \[exp_swarm_server\]\n```bash\n.*?\n```\n", re.S)


def _swarm(tmp_path: Path, port: int, server_part: str | None = None) -> Scenario:
    sc = Scenario(tmp_path / "bad", materialize("swarm", tmp_path / "bad", swarm_port=port))
    if server_part is not None:
        text = sc.blueprint.read_text()
        assert SERVER_PART.search(text)
        sc.blueprint.write_text(SERVER_PART.sub(lambda _m: server_part, text, count=1))
    return sc


def _sessions(tmux_socket: str) -> str:
    proc = subprocess.run(["tmux", "-S", tmux_socket, "list-sessions", "-F", "#{session_name}"],
                          capture_output=True, text=True, check=False)
    return proc.stdout


def _assert_rejected_and_nothing_launched(sc: Scenario, proc: subprocess.CompletedProcess[str], field: str,
                                          words: str, tmux_socket: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert field in out and words in out, out
    flag = sc.flag()
    assert flag["outcome"] in ("rejected", "failed"), flag
    report = (sc.results / "experiment_report.md").read_text()
    assert field in report and words in report
    logs = sc.results / "logs"
    assert not list(logs.glob("server-*.log")) if logs.exists() else True  # no server started
    assert not list(logs.glob("attempt-*.log")) if logs.exists() else True  # no client launched
    assert "swarm" not in _sessions(tmux_socket)


def test_empty_server_command_is_rejected(tmp_path: Path, tmux_socket: str) -> None:
    sc = _swarm(tmp_path, free_port(), "## [exp_swarm_server]\n\n")
    proc = run_cli(sc, env_for(tmux_socket))
    _assert_rejected_and_nothing_launched(sc, proc, "exp_swarm_server", "server command is empty", tmux_socket)


def test_port_that_is_no_number_is_rejected(tmp_path: Path, tmux_socket: str) -> None:
    sc = _swarm(tmp_path, free_port(), "## [exp_swarm_server]\n```bash\najet-swarm start --swarm-port=abc\n```\n")
    proc = run_cli(sc, env_for(tmux_socket))
    _assert_rejected_and_nothing_launched(sc, proc, "exp_swarm_server", "'abc' is not a port number", tmux_socket)


def test_port_held_by_a_listener_that_does_not_answer_http_is_rejected(tmp_path: Path, tmux_socket: str) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        sc = _swarm(tmp_path, port)
        proc = run_cli(sc, env_for(tmux_socket))
        _assert_rejected_and_nothing_launched(sc, proc, "exp_swarm_server", "does not answer HTTP", tmux_socket)
        assert f"swarm port {port}" in (sc.results / "experiment_report.md").read_text()
