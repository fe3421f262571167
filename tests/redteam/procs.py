"""Real runner processes for the red team: a password-protected redis-server, `serve`, `worker`, `session-host`,
and a sampler of every process's command line (what `ps` shows every user of the node)."""

from __future__ import annotations

import os
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from ajet_runner.service.embedded import find_redis_server, free_port
from tests.integration.scenario import CLI, wait_for
from tests.integration.workers import kill_group


@contextmanager
def redis_with_password(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """A private redis-server that needs a password; yields (url with the password, the password)."""
    password = "pw-" + secrets.token_hex(12)
    port = free_port()
    proc = subprocess.Popen([find_redis_server(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path), "--requirepass", password,
                             "--protected-mode", "no", "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"redis://:{password}@127.0.0.1:{port}/0"
    try:
        import redis

        wait_for(lambda: _pings(redis, url), 15, "the password-protected redis-server")
        yield url, password
    finally:
        proc.terminate()
        proc.wait(10)


def _pings(redis: object, url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_timeout=1).ping())  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - not up yet
        return False


@contextmanager
def serving(env: dict[str, str], log: Path, *args: str) -> Iterator[str]:
    """`ajet-runner serve` on a free port (extra `args`, e.g. --insecure); yields its URL once /healthz answers."""
    port = free_port()
    out = open(log, "wb")  # noqa: SIM115 - lives with the process
    proc = subprocess.Popen([*CLI, "serve", "--port", str(port), *args], env=env, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_for(up, 30, "serve to answer /healthz")
        yield url
    finally:
        kill_group(proc)  # type: ignore[arg-type]
        out.close()


class CmdlineSampler:
    """Every (pid, command line) seen in /proc while it runs, sampled every `interval` seconds."""

    def __init__(self, interval: float = 0.01) -> None:
        self.interval = interval
        self.seen: dict[tuple[int, str], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cmdline-sampler", daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for name in os.listdir("/proc"):
                if not name.isdigit():
                    continue
                try:
                    with open(f"/proc/{name}/cmdline", "rb") as fh:
                        raw = fh.read()
                except OSError:
                    continue
                if raw:
                    self.seen.setdefault((int(name), raw.replace(b"\0", b" ").decode("utf-8", "replace")),
                                         time.time())
            self._stop.wait(self.interval)

    def __enter__(self) -> CmdlineSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def lines(self) -> list[str]:
        return sorted({cmd for _, cmd in self.seen})

    def matching(self, needle: str) -> list[str]:
        return [cmd for cmd in self.lines() if needle in cmd]
