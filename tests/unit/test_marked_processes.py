"""The scoped cleanup's scan (workers/executors/local/procs.py) reads `/proc/<pid>/environ` as raw bytes: it must
find exactly the processes whose environment has the marker as a whole entry — first, last, alone, after a
long environment — and none whose value only starts with it or whose other variable contains the text."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from ajet_runner.workers.executors.local.procs import _marked_pids, processes_with_marker

MARK = "AJET_RUNNER_EXPERIMENT"


@pytest.fixture
def spawn() -> Iterator[list[subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait(10)


def _start(procs: list[subprocess.Popen[bytes]], env: dict[str, str]) -> int:
    procs.append(subprocess.Popen(["sleep", "60"], env=env))
    return procs[-1].pid


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="the raw scan reads /proc")
def test_the_marker_is_found_as_a_whole_entry_anywhere_in_the_environment(
        spawn: list[subprocess.Popen[bytes]]) -> None:
    value = f"exp-scan-{os.getpid()}"
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    first = _start(spawn, {MARK: value, **base})
    alone = _start(spawn, {MARK: value})
    last_after_pages = _start(spawn, {"BIG": "x" * 20_000, **base, MARK: value})  # /proc hands out a page a read
    _start(spawn, {**base, MARK: value + "w"})  # another experiment whose id starts with ours
    _start(spawn, {**base, "OTHER": f"{MARK}={value}"})  # the text inside another variable's value
    _start(spawn, {"X" + MARK: value, **base})  # a longer name ending in ours (first: the start is no boundary)
    expected = {first, alone, last_after_pages}
    scanned = set(_marked_pids(f"{MARK}={value}".encode()))
    assert scanned == expected
    assert {p.pid for p in processes_with_marker(MARK, value)} == expected
