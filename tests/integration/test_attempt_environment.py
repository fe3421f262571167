"""An attempt starts from the launching process's environment, never a tmux server's stale one, and never
with the control plane's keys (issues 36 and 37): real tmux server (private socket), real processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import SecretStr

from ajet_runner.store.settings import Settings
from ajet_runner.workers.executors.environment import control_plane_secrets, launch_environment
from ajet_runner.workers.executors.local.tmux import TmuxRunner
from ajet_runner.workers.executors.wrapper import env_path

pytestmark = pytest.mark.integration
MARKER = "AJET_RUNNER_EXPERIMENT"


def _env_of(path: Path) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for item in path.read_bytes().split(b"\0"):
        if b"=" in item:
            k, _, v = item.partition(b"=")
            out[k] = v
    return out


def test_a_busy_tmux_server_does_not_hand_its_old_environment_to_the_job(tmux_socket: str, tmp_path: Path) -> None:
    # The server is up before the shell exported anything new (finished panes keep one alive for 300 s):
    # a new session would get this server's global environment, with STALE_ONLY and without FRESH_KEY.
    stale = {**os.environ, "STALE_ONLY": "from-an-old-shell"}
    subprocess.run(["tmux", "-S", tmux_socket, "new-session", "-d", "-s", "keeper", "sleep 600"], env=stale,
                   check=True, timeout=10)
    shell = {k: v for k, v in os.environ.items() if k != "STALE_ONLY"}
    shell.update({"FRESH_KEY": "exported-since", "HF_ENDPOINT": "https://mirror.example",
                  "MULTI_LINE": "one\ntwo", "NOT_UTF8": "caf\udce9"})  # surrogateescape: the raw byte 0xe9
    dump = tmp_path / "env.bin"
    runner = TmuxRunner(tmux_socket, linger=0)
    logs = tmp_path / "logs"
    logs.mkdir()
    handle = runner.start("ajet_env_probe", f"{sys.executable} -c \"import os,sys; open(sys.argv[1],'wb').write("
                          f"b''.join(k+b'='+v+b'\\0' for k,v in os.environb.items()))\" {dump}",
                          cwd=str(tmp_path), env={MARKER: "exp-env"}, log_path=logs / "a.log", rc_path=logs / "a.rc",
                          pid_path=logs / "a.pid", base_env=shell)
    assert runner.wait_for_exit(handle, 30) == 0, (logs / "a.log").read_text()
    seen = _env_of(dump)
    assert seen[b"FRESH_KEY"] == b"exported-since"
    assert seen[b"HF_ENDPOINT"] == b"https://mirror.example"
    assert seen[b"MULTI_LINE"] == b"one\ntwo"
    assert seen[b"NOT_UTF8"] == b"caf\xe9"
    assert seen[b"AJET_RUNNER_EXPERIMENT"] == b"exp-env"
    assert b"STALE_ONLY" not in seen
    assert not env_path(logs / "a.log").exists(), "the environment file is removed once the wrapper read it"
    assert b"SECRET" not in (logs / "a.sh").read_bytes()


def test_without_a_base_environment_the_job_keeps_the_host_environment(tmux_socket: str, tmp_path: Path) -> None:
    """The contrast that makes the test above able to fail: the server's environment is what a job gets alone."""
    subprocess.run(["tmux", "-S", tmux_socket, "new-session", "-d", "-s", "keeper2", "sleep 600"],
                   env={**os.environ, "STALE_ONLY": "old"}, check=True, timeout=10)
    runner = TmuxRunner(tmux_socket, linger=0)
    logs = tmp_path / "logs"
    logs.mkdir()
    handle = runner.start("ajet_env_plain", "echo \"stale=$STALE_ONLY\"", cwd=str(tmp_path), env={},
                          log_path=logs / "a.log", rc_path=logs / "a.rc", pid_path=logs / "a.pid")
    assert runner.wait_for_exit(handle, 30) == 0
    assert "stale=old" in (logs / "a.log").read_text()


def _settings() -> Settings:
    return Settings(redis_url="redis://:s3cret-redis-pw@10.0.0.5:6379/0", token="tok-alpha-123,tok-beta-456",
                    webhook_secret=SecretStr("whsec-987654"), llm_api_key=SecretStr("sk-adviser-000"))


def test_the_control_plane_keeps_its_keys() -> None:
    settings = _settings()
    environ = {
        "HOME": "/root", "PATH": "/usr/bin", "SWANLAB_API_KEY": "user-own-key",
        "REDIS_URL": settings.redis_url, "AJET_RUNNER_TOKEN": "tok-alpha-123", "AJET_RUNNER_WEBHOOK_SECRET": "x",
        "AJET_RUNNER_LLM_API_KEY": "sk-adviser-000", "REDISCLI_AUTH": "s3cret-redis-pw",
        "COPY_OF_URL": "redis://:s3cret-redis-pw@10.0.0.5:6379/0", "MY_TOKEN": "Bearer tok-beta-456",
        "HOOK": "whsec-987654", "INNOCENT": "s3cret",  # shorter than any secret: not a match
    }
    env = launch_environment(settings, environ)
    assert env.variables == {"HOME": "/root", "PATH": "/usr/bin", "SWANLAB_API_KEY": "user-own-key",
                             "INNOCENT": "s3cret"}
    assert env.withheld == sorted(set(environ) - set(env.variables))
    assert "s3cret-redis-pw" in control_plane_secrets(settings)


def test_token_file_tokens_are_secrets(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("file-token-aaaa\nfile-token-bbbb,file-token-cccc\n")
    settings = Settings(token_file=str(tokens))
    env = launch_environment(settings, {"A": "x file-token-cccc y", "B": "fine"})
    assert env.variables == {"B": "fine"} and env.withheld == ["A"]
