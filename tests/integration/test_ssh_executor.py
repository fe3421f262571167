"""The ssh executor against a real private sshd (tests/integration/sshd.py): the run lives in a tmux server on
the host, starts from the host's login environment, survives a killed master connection (a reconnect, the
log read on from its offset), stops with INT/TERM/KILL leaving nothing there; without a shared disk its
files are brought back incrementally; a refused key, a host key mismatch and an unknown alias fail with
ssh's own words."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from ajet_runner.store.settings import Settings
from ajet_runner.workers.executors import build_executor
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.ssh.channel import MUX_SUFFIX, SUN_PATH, HostRefused
from ajet_runner.workers.executors.ssh.ssh_executor import SshExecutor
from tests.integration.scenario import wait_for
from tests.integration.sshd import ALIAS, SshHost, running_sshd
from tests.integration.sshd import sshd as sshd

pytestmark = [pytest.mark.integration]


def _executor(host: SshHost, target: str = ALIAS) -> SshExecutor:
    made = build_executor(Settings(ssh_config=str(host.config), pane_linger_seconds=0), "ssh", host=target)
    assert isinstance(made, SshExecutor)
    return made


def _paths(root: Path) -> dict[str, Path]:
    logs = root / "logs"
    return {"log": logs / "attempt-1.log", "rc": logs / "attempt-1.rc", "pid": logs / "attempt-1.pid"}


def _start(ex: SshExecutor, root: Path, command: str, session: str = "ajet_t_1") -> RunHandle:
    p = _paths(root)
    return ex.start(session, command, cwd=str(root), env={"AJET_RUNNER_EXPERIMENT": session}, log_path=p["log"],
                    rc_path=p["rc"], pid_path=p["pid"])


def _on_host(host: SshHost, command: str) -> str:
    return subprocess.run(["ssh", "-F", str(host.config), "-o", "BatchMode=yes", ALIAS, command],
                          capture_output=True, text=True, timeout=30, check=False).stdout


def test_a_run_starts_from_the_hosts_login_environment_and_ends_with_its_code(sshd: SshHost, tmp_path: Path) -> None:
    assert "AJET_TEST_HOST" not in os.environ
    ex = _executor(sshd)
    h = _start(ex, tmp_path, 'echo "host=$AJET_TEST_HOST exp=$AJET_RUNNER_EXPERIMENT"; exit 3')
    assert h.executor == "ssh" and h.host == ALIAS and h.pid is not None
    assert ex.wait_for_exit(h, 30) == 3
    assert "host=sshbox exp=ajet_t_1" in h.log_path.read_text()
    assert ex.capabilities.shared_files and ex.capabilities.host_environment and ex.remote()
    assert ex.attach_command(h).endswith(f"tmux -L {sshd.tmux} attach -t =ajet_t_1")
    assert sshd.logins() >= 1


def test_a_killed_master_connection_is_a_reconnect_not_a_dead_run(sshd: SshHost, tmp_path: Path) -> None:
    ex = _executor(sshd)
    h = _start(ex, tmp_path, "for i in $(seq 1 40); do echo line $i; sleep 0.1; done")
    ex.sync(h)
    assert ex.is_running(h)
    master = ex.channel.master_pid()
    assert master is not None
    os.kill(master, signal.SIGKILL)  # the link drops; the run lives in tmux on the host
    wait_for(lambda: not ex.channel.master_up(), 10, "the master to be gone")
    ex.sync(h)
    notes = ex.notices()
    assert [(n["type"], n["state"]) for n in notes] == [("host", "reconnected")], notes
    assert ex.wait_for_exit(h, 60) == 0
    lines = h.log_path.read_text().splitlines()
    assert [ln for ln in lines if ln.startswith("line ")] == [f"line {i}" for i in range(1, 41)]


def test_stop_signals_the_remote_group_and_leaves_nothing_there(sshd: SshHost, tmp_path: Path) -> None:
    ex = _executor(sshd)
    h = _start(ex, tmp_path, "sleep 300 & sleep 301 & wait")
    assert h.pgid is not None and ex.is_running(h)
    t0 = time.monotonic()
    rc = ex.stop(h, grace=5)
    took = time.monotonic() - t0
    print(f"ssh stop: rc {rc} in {took:.2f}s")
    assert rc == 130
    assert not ex.exists(h.session)
    assert _on_host(sshd, f"ps -o pid= -g {h.pgid} || true").strip() == ""
    assert not ex.is_running(h)


def test_kill_marked_runs_on_the_host(sshd: SshHost, tmp_path: Path) -> None:
    ex = _executor(sshd)
    h = _start(ex, tmp_path, "setsid sleep 300 & wait", session="ajet_t_mark")
    assert h.pid is not None
    killed = ex.kill_marked("AJET_RUNNER_EXPERIMENT", "ajet_t_mark", grace=2)
    assert killed
    assert ex.wait_for_exit(h, 30) is not None
    assert "ajet_t_mark" not in _on_host(sshd, "grep -lzx AJET_RUNNER_EXPERIMENT=ajet_t_mark /proc/[0-9]*/environ")


def test_adopt_finds_the_run_again(sshd: SshHost, tmp_path: Path) -> None:
    ex = _executor(sshd)
    h = _start(ex, tmp_path, "sleep 2; echo done")
    again = _executor(sshd).adopt(h.session, _paths(tmp_path))
    assert again is not None and again.pid == h.pid and again.host == ALIAS
    assert _executor(sshd).adopt("ajet_t_never", _paths(tmp_path / "other")) is None
    assert ex.wait_for_exit(again, 30) == 0


def test_refusals_quote_ssh(sshd: SshHost, tmp_path: Path) -> None:
    unknown = _executor(sshd, "no-such-alias")
    with pytest.raises(HostRefused, match="Could not resolve hostname no-such-alias"):
        _start(unknown, tmp_path, "echo never")
    assert not unknown.exists("ajet_x")  # a refused host holds no session of ours (start() says why)
    (sshd.dir / "authorized_keys").write_text("")  # the key is refused
    with pytest.raises(HostRefused, match="Permission denied"):
        _start(_executor(sshd), tmp_path, "echo never")
    assert not _paths(tmp_path)["pid"].exists()
    sshd.known_hosts.write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 "
                                "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n")
    with pytest.raises(HostRefused, match="Host key verification failed|REMOTE HOST IDENTIFICATION"):
        _executor(sshd).channel.run("true")


def test_a_control_dir_too_long_for_a_socket_address_still_connects(sshd: SshHost, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Under pytest-xdist the control dir was tmp_path/cm: past a socket address's 108 bytes with ssh's
    temporary suffix, every login was accepted and then the master failed (issue 35)."""
    long_dirs = [tmp_path / ("d" * 70) / "cm", tmp_path / ("e" * 70) / "cm"]
    paths = []
    for long_dir in long_dirs:
        monkeypatch.setenv("AJET_RUNNER_SSH_CONTROL_DIR", str(long_dir))
        ex = _executor(sshd)
        try:
            assert ex.channel.run("echo on-host-$AJET_TEST_HOST").out == b"on-host-sshbox\n"
            assert ex.channel.master_up() and ex.channel.master_pid() is not None
            paths.append(ex.channel.control_path)
            assert len(os.fsencode(ex.channel.control_path)) + MUX_SUFFIX < SUN_PATH
        finally:
            ex.channel.close()
    assert paths[0] != paths[1]  # two control dirs never share a master


def test_without_a_shared_disk_the_files_come_back_incrementally(tmp_path: Path, monkeypatch) -> None:
    private = tmp_path / "hostdisk"  # the host sees a tmpfs here: its own disk
    with running_sshd(tmp_path / "sshd", private_dir=private) as host:
        monkeypatch.setenv("AJET_RUNNER_SSH_CONTROL_DIR", str(host.control_dir))
        monkeypatch.setenv("AJET_RUNNER_SSH_TMUX_SOCKET", host.tmux)
        ex = _executor(host)
        root = private / "exp"
        h = _start(ex, private, f"mkdir -p {root} && for i in $(seq 1 30); do echo step $i; "
                   f"echo '{{\"step\": '$i'}}' >> {root}/val.jsonl; sleep 0.1; done; exit 4")
        h.files = [str(root / "val.jsonl")]
        assert not ex.capabilities.shared_files and h.remote_dir == str(private / "logs")
        assert not (tmp_path / "hostdisk" / "exp").exists() or h.log_path.stat().st_size < 2000
        sizes = []
        while ex.is_running(h):
            ex.sync(h)
            sizes.append(h.log_path.stat().st_size)
            time.sleep(0.3)
        assert ex.wait_for_exit(h, 30) == 4
        log = h.log_path.read_text()
        assert [ln for ln in log.splitlines() if ln.startswith("step ")] == [f"step {i}" for i in range(1, 31)]
        assert len((root / "val.jsonl").read_text().splitlines()) == 30
        assert len(set(sizes)) > 1  # read while it ran, not once at the end


def test_a_host_unreachable_past_the_limit_is_named_and_the_run_given_up(tmp_path: Path, monkeypatch) -> None:
    with running_sshd(tmp_path / "sshd") as host:
        monkeypatch.setenv("AJET_RUNNER_SSH_CONTROL_DIR", str(host.control_dir))
        monkeypatch.setenv("AJET_RUNNER_SSH_TMUX_SOCKET", host.tmux)
        ex = SshExecutor(ALIAS, config=str(host.config), linger=0, unreachable_after=2.0)
        try:
            h = _start(ex, tmp_path, "sleep 300")
            assert ex.is_running(h)
            ex.channel.close()
            os.killpg(host.pid, signal.SIGTERM)  # sshd and its connections go; the run lives on in tmux there
            wait_for(lambda: not host.alive() or os.waitpid(host.pid, os.WNOHANG)[0] != 0, 10, "sshd to exit")
            ex.sync(h)
            assert [(n["type"], n["state"]) for n in ex.notices()] == [("host", "unreachable")]
            assert ex.is_running(h) or ex.lost(h)  # unknown, not dead, until the limit
            time.sleep(2.1)
            ex.sync(h)
            why = ex.lost(h)
            assert why.startswith(f"host {ALIAS} unreachable for") and "Connection refused" in why, why
            assert not ex.is_running(h) and ex.exit_code(h) is None
        finally:
            subprocess.run(["tmux", "-L", host.tmux, "kill-server"], capture_output=True, check=False)
