"""Timeouts that scale with the machine's measured load, for tests that wait on real processes.

A deadline that is generous on a quiet 2-core machine fails at load 25 (issue 39: 8 failures of a full
run were timeouts that passed alone). A wait never makes a test pass that should fail: it only gives a
slow machine the time a quiet one needs, measured when the wait starts.
"""

from __future__ import annotations

import os

MAX_FACTOR = 6.0  # past this the machine is too loaded to be waited out: fail and say so


def load_factor() -> float:
    """The 1-minute load average per core, at least 1 (a quiet machine's timeouts stay as written)."""
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 1.0
    return min(MAX_FACTOR, max(1.0, load / (os.cpu_count() or 1)))


def scaled(seconds: float) -> float:
    """`seconds` as written for a quiet machine, scaled by the load measured now."""
    return seconds * load_factor()


def examples(full: int) -> int:
    """A property test's examples: `full` under `make fuzz` (AJET_FUZZ_EXAMPLES set), a quarter of it (at
    least 50) in `make test`, where hypothesis budgets were a sixth of the suite's time (issue 39). The same
    properties, fewer random inputs per run; hypothesis' database still replays any failure it found."""
    if os.environ.get("AJET_FUZZ_EXAMPLES"):
        return full
    return min(full, max(50, full // 4))
