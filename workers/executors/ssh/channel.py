"""The control channel to one ssh host: OpenSSH's own client, one multiplexed master connection per host.

Options come from an OpenSSH client config (`AJET_RUNNER_SSH_CONFIG`, else the user's ~/.ssh/config), so keys,
ports, jump hosts and known hosts work as ssh users expect; the runner adds only what it needs: no prompts
(BatchMode), a master connection it can reuse (ControlMaster/ControlPath/ControlPersist) and keep-alives.

A call that fails because the link is down (ssh's exit 255 with a transport error) is retried with backoff;
one ssh refuses for a reason a retry cannot change (a refused key, a host key mismatch, a name that does not
resolve) raises `HostRefused` at once with ssh's own words. A dropped master is replaced by the next call
(ControlMaster=auto); `reconnects` counts it so the watch can say so. A replaced master is known by its socket
file (a new master binds a new one), looked at after each call: a check before the call missed a master
killed between the check and the call (the call itself then became the new master), and one another
process had already replaced.
"""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.statemachine.shell.ssh_login import LoginError, SshTarget, parse_target
from ajet_runner.workers.executors.protocol import ExecutorError

log = logging.getLogger(__name__)

SSH_FAILED = 255  # ssh's own exit code for a connection or authentication failure
CONNECT_TIMEOUT = 15
PERSIST = 600  # seconds the master stays after its last client
# A unix socket address holds at most this many bytes, its NUL included (sockaddr_un.sun_path); the master
# first binds "<ControlPath>.<16 random characters>", then renames it: a ControlPath longer than
# SUN_PATH - 1 - MUX_SUFFIX fails after the login ("unix_listener: ... too long for Unix domain socket").
SUN_PATH = 104 if sys.platform == "darwin" else 108
MUX_SUFFIX = 17
SHORT_DIR = "/tmp"  # where the sockets go when the control dir's path is too long for one
# ssh's words for failures a retry cannot change: said at once, quoted.
_PERMANENT = ("Permission denied", "Host key verification failed", "REMOTE HOST IDENTIFICATION HAS CHANGED",
              "Could not resolve hostname", "No such file or directory", "Bad configuration option",
              "Too many authentication failures", "no matching host key type", "Unable to negotiate",
              "Bad owner or permissions", "command-line line", "garbage at end of line", "Invalid argument",
              "too long for Unix domain socket")


class SshError(ExecutorError):
    """ssh failed; the message names the host and quotes ssh."""

    def __init__(self, host: str, message: str) -> None:
        super().__init__(message)
        self.host = host


class HostRefused(SshError):
    """ssh refused the host for good (key, host key, name): a retry would meet the same refusal."""


class HostUnreachable(SshError):
    """The host did not answer for longer than the retries allow."""


def control_dir() -> Path:
    """Where master sockets live: short (a unix socket path is at most 108 bytes), private (0700)."""
    default = Path(tempfile.gettempdir()) / f"ajet-ssh-{os.getuid()}"
    path = Path(os.environ.get("AJET_RUNNER_SSH_CONTROL_DIR") or default)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def fits_socket(path: Path) -> bool:
    """Whether ssh can bind its master's socket at `path` (and the temporary name it binds first)."""
    return len(os.fsencode(path)) + MUX_SUFFIX < SUN_PATH


def control_path(config: str, host: str) -> Path:
    """The master socket for `host` under `config`: in control_dir() when the path fits a socket address;
    else (a long AJET_RUNNER_SSH_CONTROL_DIR or TMPDIR) in a short private dir under /tmp, the long dir
    being part of the name so two control dirs never share a master. Raises when neither fits."""
    digest = hashlib.sha1(f"{config}|{host}".encode()).hexdigest()[:20]
    wanted = control_dir()
    path = wanted / f"cm-{digest}"
    if fits_socket(path):
        return path
    short = Path(SHORT_DIR) / f"ajet-ssh-{os.getuid()}"
    digest = hashlib.sha1(f"{wanted}|{config}|{host}".encode()).hexdigest()[:20]
    fallback = short / f"cm-{digest}"
    if not fits_socket(fallback):
        raise HostRefused(host, f"ssh {host}: no path for the master connection's socket fits a unix socket "
                                f"address ({SUN_PATH - 1 - MUX_SUFFIX} bytes): {path}; set "
                                "AJET_RUNNER_SSH_CONTROL_DIR to a short directory")
    short.mkdir(mode=0o700, parents=True, exist_ok=True)
    log.warning("ssh control dir %s is too long for a unix socket path (%d bytes at most with ssh's "
                "temporary suffix); the master connection for %s uses %s", wanted, SUN_PATH - 1 - MUX_SUFFIX,
                host, fallback)
    return fallback


def ssh_message(stderr: str) -> str:
    """ssh's own words, without its warnings about known hosts it added."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    kept = [ln for ln in lines if not ln.startswith("Warning: Permanently added")]
    return "; ".join(kept[-4:]) or "no message"


@dataclass
class Result:
    rc: int
    out: bytes
    err: str


class SshChannel:
    """Runs scripts on one host over a multiplexed connection."""

    def __init__(self, host: str, *, config: str = "", retries: int = 3, backoff: float = 1.0) -> None:
        try:
            self.target: SshTarget = parse_target(host)
        except LoginError as exc:
            raise HostRefused(host, f"ssh host {host!r}: {exc}") from exc
        self.host = host
        self.config = config
        if config and not Path(config).is_file():
            raise HostRefused(host, f"ssh config {config} (AJET_RUNNER_SSH_CONFIG) does not exist")
        self.retries = retries
        self.backoff = backoff
        self.control_path = control_path(config, host)
        self.reconnects = 0
        self._master: tuple[int, int] | None = None  # the master's socket (inode, ctime) at the last answer

    def base_args(self) -> list[str]:
        """`ssh` with the config and the runner's options, up to the destination."""
        return [
            "ssh", *(["-F", self.config] if self.config else []),
            "-o", "BatchMode=yes", "-o", "ControlMaster=auto", "-o", f"ControlPath={self.control_path}",
            "-o", f"ControlPersist={PERSIST}", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3",
            "-o", f"ConnectTimeout={CONNECT_TIMEOUT}", "-o", "LogLevel=ERROR",
            *self.target.ssh_args(),
        ]

    def master_up(self) -> bool:
        """A master answers on the control socket (a socket file alone may be stale)."""
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            try:
                sock.connect(str(self.control_path))
                return True
            except OSError:
                return False

    def master_pid(self) -> int | None:
        """The master connection's pid (`ssh -O check`), for tests and the bench that cut the link."""
        proc = subprocess.run([*self.base_args()[:-2], "-O", "check", self.target.destination()],
                              capture_output=True, text=True, timeout=10, check=False)
        text = proc.stderr + proc.stdout
        if "pid=" not in text:
            return None
        return int(text.split("pid=", 1)[1].split(")", 1)[0])

    def run(self, script: str, *, stdin: bytes = b"", timeout: float = 60.0, retry: bool = True) -> Result:
        """Run `script` with bash on the host (its login environment is not sourced: tools only).

        Retries a dropped link; raises HostRefused for a refusal, HostUnreachable when retries run out."""
        attempts = self.retries if retry else 1
        last = ""
        for n in range(attempts):
            try:
                proc = subprocess.run([*self.base_args(), "bash -s"], input=script.encode() + b"\n" + stdin,
                                      capture_output=True, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                last = f"no answer within {format_limit(timeout)}"
                time.sleep(self.backoff * (2 ** n))
                continue
            err = proc.stderr.decode("utf-8", "replace")
            if proc.returncode != SSH_FAILED or (proc.stdout and not _transport_error(err)):
                self._note_master()
                return Result(proc.returncode, proc.stdout, err)
            last = ssh_message(err)
            if any(p in err for p in _PERMANENT):
                raise HostRefused(self.host, f"ssh {self.host}: {last}")
            if n + 1 < attempts:
                time.sleep(self.backoff * (2 ** n))
        raise HostUnreachable(self.host, f"ssh {self.host}: {last}")

    def _note_master(self) -> None:
        """Count a reconnect when the master that answered is not the one that answered last time."""
        try:
            st = os.stat(self.control_path)
            master: tuple[int, int] | None = (st.st_ino, st.st_ctime_ns)
        except OSError:
            master = None
        if self._master is not None and master != self._master:
            self.reconnects += 1
        self._master = master

    def close(self) -> None:
        """End the master connection (the runs on the host are not touched)."""
        subprocess.run([*self.base_args()[:-2], "-O", "exit", self.target.destination()], capture_output=True,
                       timeout=10, check=False)


def _transport_error(err: str) -> bool:
    return any(w in err for w in ("Connection refused", "Connection closed", "Connection reset", "timed out",
                                  "Broken pipe", "kex_exchange_identification", "Control socket connect"))
