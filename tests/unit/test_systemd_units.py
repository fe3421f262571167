"""The systemd units in deploy/systemd/ parse cleanly (`systemd-analyze verify`) and keep the split
that lets runs outlive a worker restart: the tmux server in its own unit, the worker using its socket."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
SOCKET = "/run/ajet-runner/tmux.sock"


def unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(UNITS / name)
    return parser


def test_the_worker_uses_the_session_hosts_socket() -> None:
    host, worker = unit("ajet-runner-session-host.service"), unit("ajet-runner-worker.service")
    assert host["Service"]["ExecStart"].endswith(f"session-host --socket {SOCKET}")
    assert f"AJET_RUNNER_TMUX_SOCKET={SOCKET}" in worker["Service"]["Environment"]
    assert worker["Service"]["ExecStart"].endswith("ajet-runner worker")
    assert "ajet-runner-session-host.service" in worker["Unit"]["Requires"]
    assert "ajet-runner-session-host.service" in worker["Unit"]["After"]
    assert host["Service"]["RuntimeDirectoryPreserve"] == "yes"


@pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not installed")
def test_units_verify(tmp_path: Path) -> None:
    exe = str(Path(sys.executable).with_name("ajet-runner"))
    for path in UNITS.glob("*.service"):
        text = path.read_text().replace("/opt/ajet-runner/bin/ajet-runner", exe)
        (tmp_path / path.name).write_text(text.replace("User=ajet", "User=root").replace("Group=ajet", "Group=root"))
    proc = subprocess.run(["systemd-analyze", "verify", *sorted(str(p) for p in tmp_path.glob("*.service"))],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr
