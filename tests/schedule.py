"""The suite's order under xdist: slowest first, so the long tests start at once (issue 39 item 7).

With pytest-xdist's `load` order a 70 s scenario collected late starts when the other workers have little left,
and the run ends with one worker busy and the others idle. Ordered by their last measured seconds (the longest
processing time first) and handed out one at a time (`--dist loadgroup`, `make test`), the short tests fill in
around the long ones. Tests that share an expensive module fixture (a SLURM cluster) carry an `xdist_group`
mark and stay on one worker, in their order.

The seconds come from the last run on this checkout (pytest's cache, key `ajet/durations`), else from
tests/durations.json (committed: a fresh clone gets the order too; `python -m tests.schedule` rewrites it from
the cache). A test not measured yet counts as UNMEASURED_SLOW_SECONDS if it is marked `slow`, else 0 (it keeps
its place after the measured ones). The order only moves tests: it changes no test and no assertion.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS_FILE = Path(__file__).resolve().parent / "durations.json"
CACHE_KEY = "ajet/durations"
KEEP_SECONDS = 0.5  # the committed file lists the tests above this: the rest are noise for the order
# A test marked `slow` that was never measured (new, or not in the file) is taken to last this long: it starts
# among the measured scenarios, not after the thousand short unit tests.
UNMEASURED_SLOW_SECONDS = 20.0


def base_nodeid(nodeid: str) -> str:
    """The node id without the `@group` suffix that `--dist loadgroup` appends (a `@` inside a test's
    parameters, before its `]`, stays)."""
    head, at, tail = nodeid.rpartition("@")
    return head if at and "]" not in tail and "::" not in tail and "/" not in tail else nodeid


def known_durations(config: pytest.Config) -> dict[str, float]:
    """Seconds per test: the committed file, overridden by the last runs here."""
    seconds: dict[str, float] = {}
    if DURATIONS_FILE.exists():
        seconds.update(json.loads(DURATIONS_FILE.read_text(encoding="utf-8")))
    cache = getattr(config, "cache", None)
    if cache is not None:
        seconds.update(cache.get(CACHE_KEY, {}))
    return seconds


def group_of(item: pytest.Item) -> str:
    """The unit xdist hands out whole: the test's `xdist_group`, else the test itself."""
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return base_nodeid(item.nodeid)
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def slowest_first(items: list[pytest.Item], seconds: dict[str, float]) -> None:
    """Sort `items` in place by their unit's measured seconds, longest first; stable, so a group's tests and
    the unmeasured ones keep their order."""
    per_unit: dict[str, float] = defaultdict(float)
    for item in items:
        unmeasured = UNMEASURED_SLOW_SECONDS if item.get_closest_marker("slow") is not None else 0.0
        per_unit[group_of(item)] += seconds.get(base_nodeid(item.nodeid), unmeasured)
    items.sort(key=lambda item: -per_unit[group_of(item)])


class Recorder:
    """Collects each test's seconds (set-up, call and tear-down) where the reports arrive (the xdist
    controller, or the only process), and merges them into the cache at the end of the run."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def add(self, report: pytest.TestReport) -> None:
        self.seconds[base_nodeid(report.nodeid)] += report.duration

    def save(self, config: pytest.Config) -> None:
        cache = getattr(config, "cache", None)
        if cache is None or not self.seconds:
            return
        merged = dict(cache.get(CACHE_KEY, {}))
        merged.update({nodeid: round(value, 2) for nodeid, value in self.seconds.items()})
        cache.set(CACHE_KEY, merged)


def write_committed(cache_dir: Path) -> int:
    """Rewrite tests/durations.json from the cache of the last runs (the tests above KEEP_SECONDS)."""
    path = cache_dir / "v" / CACHE_KEY
    if not path.exists():
        print(f"no measured durations at {path}: run the suite first", file=sys.stderr)
        return 1
    seconds = json.loads(path.read_text(encoding="utf-8"))
    kept = {k: v for k, v in sorted(seconds.items(), key=lambda kv: -kv[1]) if v >= KEEP_SECONDS}
    DURATIONS_FILE.write_text(json.dumps(kept, indent=0) + "\n", encoding="utf-8")
    print(f"{DURATIONS_FILE}: {len(kept)} tests above {KEEP_SECONDS} s")
    return 0


if __name__ == "__main__":
    sys.exit(write_committed(Path(__file__).resolve().parent.parent / ".pytest_cache"))
