"""An ssh host that ssh cannot reach by its name is refused by `check` and `run` before anything is queued
(issue 35, bad input): the message names the alias and the ssh config files read. The lookup is OpenSSH's own
(`ssh -G` with the config, then the name service); no sshd is needed: nothing logs in."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ajet_runner.workers.executors.ssh_hosts import unknown_host
from tests.integration.scenario import CLI, make
from tests.integration.test_ssh_run import seed_blueprint

pytestmark = [pytest.mark.integration]


def _config(tmp_path: Path) -> Path:
    """A client config: one alias that resolves, one whose HostName does not, one behind a jump host."""
    config = tmp_path / "ssh_config"
    config.write_text("""Host known-box
    HostName 127.0.0.1
    Port 2222
    User root

Host ghost-box
    HostName no-such-name.invalid

Host jumped-box
    HostName inner.invalid
    ProxyJump known-box
""")
    return config


def test_the_ssh_config_decides_which_hosts_are_known(tmp_path: Path) -> None:
    config = str(_config(tmp_path))
    assert unknown_host("known-box", config) == ""
    assert unknown_host("root@127.0.0.1:2222", config) == ""  # a host written out needs no Host entry
    assert unknown_host("localhost", config) == ""
    assert unknown_host("jumped-box", config) == ""  # only the jump host resolves its HostName
    why = unknown_host("no-such-gpu-box", config)
    assert why.startswith("ssh host 'no-such-gpu-box' is not a Host in the ssh config read") and config in why, why
    assert "add `Host no-such-gpu-box`" in why
    why = unknown_host("ghost-box", config)
    assert "HostName no-such-name.invalid" in why and config in why and "does not resolve" in why, why
    why = unknown_host("known-box", str(tmp_path / "missing_config"))
    assert "missing_config (AJET_RUNNER_SSH_CONFIG) does not exist" in why, why


def test_check_refuses_an_unknown_alias_naming_it_and_the_config(tmp_path: Path) -> None:
    config = _config(tmp_path)
    env = {**os.environ, "AJET_RUNNER_SSH_CONFIG": str(config)}
    sc = make("demo", tmp_path / "unknown")
    seed_blueprint(sc, "ssh no-such-gpu-box")
    proc = subprocess.run([*CLI, "check", str(sc.blueprint), "--json"], env=env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    host_problems = [p for p in doc["problems"] if p["field"] == "exp_host"]
    assert [p["level"] for p in host_problems] == ["error"], doc["problems"]
    assert "no-such-gpu-box" in host_problems[0]["message"] and str(config) in host_problems[0]["message"]
    text = subprocess.run([*CLI, "check", str(sc.blueprint)], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert "no-such-gpu-box" in text.stdout and "not runnable" in text.stdout, text.stdout

    known = make("demo", tmp_path / "known")
    seed_blueprint(known, "ssh known-box")
    proc = subprocess.run([*CLI, "check", str(known.blueprint), "--json"], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    doc = json.loads(proc.stdout)
    assert doc["runs_on"]["host"] == "known-box"
    assert not [p for p in doc["problems"] if p["field"] == "exp_host"], doc["problems"]
