"""A blueprint names its ssh host the way researchers write it (statemachine/shell/ssh_login.py, blueprint_host.py)."""

from __future__ import annotations

import pytest

from ajet_runner.statemachine.blueprint.check_document import runs_on
from ajet_runner.statemachine.blueprint.parse import parse_blueprint
from ajet_runner.statemachine.shell.ssh_login import (
    LoginError,
    SshTarget,
    find_login_lines,
    parse_ssh_words,
    parse_target,
)

BASE = """[exp_purpose] test
[exp_codebase_dir] /srv/code
[exp_venv_exe] /srv/code/.venv/bin/python
[exp_yaml_path] a.yaml
[exp_launch_command] {command}
[exp_result_dir] /srv/res
[exp_max_time] 10m

{extra}
"""
LAUNCH = "python -m ajet.launcher --conf a.yaml"


def _bp(extra: str, command: str = LAUNCH):
    return parse_blueprint(BASE.format(command=command, extra=extra))


@pytest.mark.parametrize(("extra", "host"), [
    ("login: ssh root@gpu1 -p 8824", "root@gpu1:8824"),
    ("Login：ssh -p 8824 user@gpu1", "user@gpu1:8824"),
    ("登录：ssh root@10.0.0.5 -p 22", "root@10.0.0.5:22"),
    ("## 主机\ngpu-box-3", "gpu-box-3"),
    ("[exp_host] user@h:2222", "user@h:2222"),
    ("[exp_host] ssh://user@h:2222", "user@h:2222"),
    ("## Notes\nlogin\nssh root@localhost -p 8824\ngoto\n/srv/code", "root@localhost:8824"),
    ("## Notes\nFirst: `ssh gpu7`, then train.\n\n    ssh gpu7", "gpu7"),
    ("## Notes\n$ ssh -l alice gpu7", "alice@gpu7"),
])
def test_hosts_as_researchers_write_them(extra: str, host: str) -> None:
    bp = _bp(extra)
    assert bp.exp_host == host, bp.parse_problems
    assert not [p for p in bp.parse_problems if p.level == "error"]
    assert runs_on(bp) == {"executor": "ssh", "host": host, "from": bp.exp_host_source}


def test_prose_that_mentions_ssh_names_no_host() -> None:
    bp = _bp("## Notes\nUse ssh to look at the logs; the ssh key is in the vault.")
    assert bp.exp_host == "" and runs_on(bp)["executor"] == "local"


def test_an_ssh_login_around_the_launch_command_is_read_as_the_host_with_a_warning() -> None:
    bp = _bp("", command=f"ssh root@gpu1 -p 8824 'cd /srv/code && {LAUNCH}'")
    assert bp.exp_host == "root@gpu1:8824"
    assert bp.exp_launch_command == f"cd /srv/code && {LAUNCH}"
    (warning,) = [p for p in bp.parse_problems if p.field == "exp_launch_command"]
    assert warning.level == "warning" and "login: ssh -p 8824 root@gpu1" in warning.message


def test_an_ssh_launch_command_that_is_not_one_quoted_command_is_refused_saying_how() -> None:
    bp = _bp("", command=f"ssh root@gpu1 -p 8824 cd /srv/code && {LAUNCH}")
    (error,) = [p for p in bp.parse_problems if p.level == "error"]
    assert error.field == "exp_launch_command"
    assert "put the login on its own line (login: ssh -p 8824 root@gpu1)" in error.message


@pytest.mark.parametrize(("extra", "words"), [
    ("login: ssh -J jump root@h", "Host entry of your ssh config"),
    ("login: ssh -i ~/.ssh/key root@h", "Host entry of your ssh config"),
    ("login: ssh root@h -p 99999", "not a port"),
    ("login: ssh root@h:22 -p 23", "two ports"),
    ("login: ssh a\nssh b", "more than one host"),
    ("[exp_host] not a host!", "not a host"),
])
def test_logins_the_runner_cannot_use_are_errors_naming_why(extra: str, words: str) -> None:
    bp = _bp(extra)
    errors = [p for p in bp.parse_problems if p.level == "error"]
    assert errors and words in errors[0].message and errors[0].field == "exp_host", errors
    assert bp.exp_host == ""


def test_targets_and_ssh_words() -> None:
    assert parse_target("gpu1") == SshTarget("gpu1")
    assert str(parse_target("u@[::1]:22")) == "u@[::1]:22"
    assert parse_ssh_words(["ssh", "-tt", "u@h", "-p", "2", "nvidia-smi"]) == (SshTarget("h", "u", 2), ["nvidia-smi"])
    assert parse_ssh_words(["ssh", "-p2", "--", "h"]) == (SshTarget("h", "", 2), [])
    assert SshTarget("h", "u", 2).ssh_args() == ["-p", "2", "--", "u@h"]
    with pytest.raises(LoginError, match="names no host"):
        parse_ssh_words(["ssh", "-p", "22"])
    assert find_login_lines("ssh gpu1 nvidia-smi\nlogin: ssh gpu2 ls") [0][1] == "login: ssh gpu2 ls"


def test_the_host_is_kept_for_the_worker_but_not_in_the_public_blueprint() -> None:
    bp = _bp("login: ssh gpu1")
    assert "exp_host" not in bp.public()
    assert bp.stored()["exp_host"] == "gpu1"
