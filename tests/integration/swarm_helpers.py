"""What the swarm tests share: a free port, a listening check and a materialised swarm template."""

from __future__ import annotations

import socket
from pathlib import Path

from ajet_runner.service.demo import materialize
from tests.integration.scenario import Scenario


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def make_swarm(template: str, tmp_path: Path, port: int) -> Scenario:
    workdir = tmp_path / template
    return Scenario(workdir, materialize(template, workdir, swarm_port=port))
