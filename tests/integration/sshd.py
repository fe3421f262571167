"""A private OpenSSH server for the ssh executor's tests (docs/executors.md#ssh, executors-notes.md).

Its own host key, client key and authorized_keys under a temporary directory, a free port on 127.0.0.1,
`SetEnv AJET_TEST_HOST=sshbox` so the host's login environment differs from the local one, and a client
config (the file `AJET_RUNNER_SSH_CONFIG` names) with the alias `sshbox`. Stopped by pid. `unshare` runs
it in its own mount namespace with a tmpfs over a directory: a host that does not share that disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.load import scaled

SSHD = "/usr/sbin/sshd"
HOST_VAR = ("AJET_TEST_HOST", "sshbox")
ALIAS = "sshbox"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class SshHost:
    dir: Path
    port: int
    pid: int
    config: Path  # client config: Host sshbox and Host 127.0.0.1, with the key and known hosts
    client_key: Path
    known_hosts: Path
    tmux: str = "ajet-runner"  # the runner's tmux server name on the host (AJET_RUNNER_SSH_TMUX_SOCKET)
    control_dir: Path | None = None  # this test's AJET_RUNNER_SSH_CONTROL_DIR (running_sshd makes a short one)

    @property
    def login(self) -> str:
        """How the seed writes its login, against this server."""
        return f"ssh root@127.0.0.1 -p {self.port}"

    @property
    def target(self) -> str:
        return f"root@127.0.0.1:{self.port}"

    def alive(self) -> bool:
        """Whether sshd still runs. It is this process's child: reaped here, so its zombie does not count
        (stop_sshd used to wait its full 5 s on one after every test)."""
        with contextlib.suppress(ChildProcessError):
            if os.waitpid(self.pid, os.WNOHANG)[0] == self.pid:
                return False
        try:
            os.kill(self.pid, 0)
            return True
        except ProcessLookupError:
            return False

    def log(self) -> str:
        return (self.dir / "sshd.log").read_text(errors="replace")

    def logins(self) -> int:
        return self.log().count("Accepted publickey")


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


def start_sshd(base: Path, *, private_dir: Path | None = None) -> SshHost:
    """Start sshd under `base`; `private_dir`: the host sees a tmpfs there (its own disk), not ours."""
    if not Path(SSHD).exists() or shutil.which("ssh") is None:
        pytest.skip("openssh-server/openssh-client not installed (scripts/ensure-test-deps.sh installs them)")
    base.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(exist_ok=True)
    _keygen(base / "hostkey")
    _keygen(base / "clientkey")
    shutil.copy(base / "clientkey.pub", base / "authorized_keys")
    port = free_port()
    (base / "sshd_config").write_text(f"""Port {port}
ListenAddress 127.0.0.1
HostKey {base / 'hostkey'}
PidFile {base / 'sshd.pid'}
AuthorizedKeysFile {base / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
ClientAliveInterval 5
MaxSessions 50
MaxStartups 50
SetEnv {HOST_VAR[0]}={HOST_VAR[1]}
""")
    known = base / "known_hosts"
    pub = (base / "hostkey.pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    config = base / "ssh_config"
    config.write_text(f"""Host {ALIAS}
    HostName 127.0.0.1
    Port {port}
    User root

Host *
    IdentityFile {base / 'clientkey'}
    IdentitiesOnly yes
    UserKnownHostsFile {known}
    StrictHostKeyChecking yes
""")
    cmd = [SSHD, "-D", "-f", str(base / "sshd_config"), "-E", str(base / "sshd.log")]
    if private_dir is not None:
        private_dir.mkdir(parents=True, exist_ok=True)
        cmd = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
               f"mount -t tmpfs tmpfs {private_dir} && exec " + " ".join(cmd)]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + scaled(30)
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited {proc.returncode}: {(base / 'sshd.log').read_text(errors='replace')}")
        time.sleep(0.05)
    else:
        raise RuntimeError("sshd did not listen within 30 s")
    return SshHost(base, port, proc.pid, config, base / "clientkey", known, tmux=f"ajet-test-{port}")


def stop_sshd(host: SshHost) -> None:
    """Stop the server (by its pid) and the runner's tmux server it hosted (by the pid tmux reports)."""
    with contextlib.suppress(Exception):
        subprocess.run(["ssh", "-F", str(host.config), "-o", "BatchMode=yes", "-p", str(host.port), "root@127.0.0.1",
                        f"tmux -L {host.tmux} kill-server"], capture_output=True, timeout=20, check=False)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(host.pid, signal.SIGTERM)
    for _ in range(100):
        if not host.alive():
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.killpg(host.pid, signal.SIGKILL)
        os.waitpid(host.pid, 0)


def close_masters(control_dir: Path) -> None:
    """End the master connections the runner left in `control_dir` (ControlPersist keeps them 10 minutes;
    each holds an sshd child that outlives the listener)."""
    for sock in sorted(control_dir.glob("cm-*")) if control_dir.is_dir() else []:
        subprocess.run(["ssh", "-o", f"ControlPath={sock}", "-O", "exit", "unused"], capture_output=True,
                       timeout=20, check=False)


@contextlib.contextmanager
def running_sshd(base: Path, *, private_dir: Path | None = None, control_dir: Path | None = None
                 ) -> Iterator[SshHost]:
    """sshd, and a control dir for the runner's masters: `control_dir`, else a new short one under /tmp.

    Short, because a pytest-xdist tmp_path (/tmp/pytest-of-root/pytest-N/popen-gwN/<test>0/cm/cm-<20>) plus
    the 17 bytes ssh adds while binding passed the 108 bytes of a unix socket address: every login was
    accepted, then the master failed (issue 35). The product now falls back to a short dir by itself
    (channel.control_path); the tests keep their masters in their own dir to find and end them."""
    own = control_dir is None
    cm = Path(tempfile.mkdtemp(prefix="ajcm-", dir="/tmp")) if control_dir is None else control_dir
    host = start_sshd(base, private_dir=private_dir)
    host.control_dir = cm
    try:
        yield host
    finally:
        close_masters(cm)
        stop_sshd(host)
        if own:
            shutil.rmtree(cm, ignore_errors=True)


@pytest.fixture()
def sshd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshHost]:
    """A private sshd, the client config exported as AJET_RUNNER_SSH_CONFIG, a private control dir."""
    with running_sshd(tmp_path / "sshd") as host:
        monkeypatch.setenv("AJET_RUNNER_SSH_CONFIG", str(host.config))
        monkeypatch.setenv("AJET_RUNNER_SSH_CONTROL_DIR", str(host.control_dir))
        monkeypatch.setenv("AJET_RUNNER_SSH_TMUX_SOCKET", host.tmux)
        yield host
