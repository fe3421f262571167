"""Shared fixtures: a private redis-server and a private tmux socket per test session.

Tests never touch the machine's Redis on 6379 or a person's tmux sessions.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ajet_runner.service.embedded import EmbeddedRedis
from tests import schedule
from tests.load import load_factor, scaled

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CORPUS = Path(__file__).resolve().parent / "corpus"
# The `ajet-runner` command as this interpreter runs it from this checkout: no venv layout assumed.
CLI = [sys.executable, "-m", "ajet_runner"]


def run_cli(*args: str, timeout: float = 60, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """`ajet-runner ARGS...` in a child process (cwd: the repo, so `cli` imports even when not installed);
    `timeout` is for a quiet machine, scaled by the load (tests/load.py)."""
    kwargs.setdefault("cwd", REPO)
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=scaled(timeout), check=False,
                          **kwargs)  # type: ignore[call-overload]


_SUITE_T0 = time.monotonic()
_SUITE_LOAD0 = os.getloadavg()[0]


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """pytest-timeout's limit (the ini's, or the test's own mark) scaled by the load measured as the test
    starts (tests/load.py): at load 25 on 2 cores a test gets the time it needs, not a timeout failure."""
    factor = load_factor()
    if factor > 1.0:
        mark = item.get_closest_marker("timeout")
        base = float(mark.args[0]) if mark is not None and mark.args else float(item.config.getini("timeout") or 0)
        if base > 0:
            item.add_marker(pytest.mark.timeout(base * factor), append=False)
    yield


_RECORDER = schedule.Recorder()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `--dist loadgroup` (make test) the slowest tests first (tests/schedule.py): the long scenarios
    start at once and the short tests fill in around them. Other modes keep the collection order: `load`
    hands out consecutive chunks, and one worker would get every slow test."""
    if getattr(config.option, "loadgroup", False):  # set by pytest-xdist in its workers (their `dist` reads "no")
        schedule.slowest_first(items, schedule.known_durations(config))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's seconds, for the next run's order (recorded where every report arrives: the xdist
    controller, or the only process)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        _RECORDER.add(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        _RECORDER.save(session.config)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Every run ends with its wall time and the load it ran at, after the slowest 20 (`--durations=20`)."""
    wall = time.monotonic() - _SUITE_T0
    terminalreporter.write_line(f"suite wall time {wall:.0f} s ({wall / 60:.1f} min); load average "
                                f"{_SUITE_LOAD0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
                                f"on {os.cpu_count()} cores")


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
