"""Shared fixtures: a private redis-server and a private tmux socket per test session.

Tests never touch the machine's Redis on 6379 or a person's tmux sessions.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ajet_runner.service.embedded import EmbeddedRedis

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CORPUS = Path(__file__).resolve().parent / "corpus"
# The `ajet-runner` command as this interpreter runs it from this checkout: no venv layout assumed.
CLI = [sys.executable, "-m", "ajet_runner"]


def run_cli(*args: str, timeout: float = 60, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """`ajet-runner ARGS...` in a child process (cwd: the repo, so `cli` imports even when not installed)."""
    kwargs.setdefault("cwd", REPO)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, check=False,
                          **kwargs)  # type: ignore[call-overload]


@pytest.fixture(autouse=True)
def ctrl_c_is_a_keyboard_interrupt() -> Iterator[None]:
    """Every test starts with Python's own SIGINT handler. Something in a pytest worker left SIGINT
    without it: a `signal.pthread_kill(main, SIGINT)` raised nothing for 300 s there, and the CLIs that
    the Ctrl-C tests start inherited a SIGINT they ignored. Those tests failed in full runs only."""
    before = signal.getsignal(signal.SIGINT)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        if before is not None:
            signal.signal(signal.SIGINT, before)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture()
def redis_url(redis_server: EmbeddedRedis) -> Iterator[str]:
    """A clean database on the private server for each test."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    yield redis_server.url
    client.close()


@pytest.fixture()
def tmux_socket(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A private tmux server socket; everything on it is killed after the test."""
    if not shutil.which("tmux"):
        pytest.skip("tmux is not installed")
    sock = str(tmp_path_factory.mktemp("tmux") / "tmux.sock")
    monkeypatch.setenv("AJET_RUNNER_TMUX_SOCKET", sock)
    yield sock
    subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, check=False)
    if os.path.exists(sock):
        os.unlink(sock)
