"""The red team's table: each case appends a row (what was tried, how many, the result) that
`tests/redteam/run.py` (make redteam) prints; under plain pytest the rows go nowhere.

The fast cases run in `make test` too; the full ones (a real run under a hostile model, Chromium,
planted secrets through a whole run, a whole run under six concurrent submissions) only with
AJET_REDTEAM=full, which the runner sets.
"""

from __future__ import annotations

import json
import os
import time

import pytest

REPORT_ENV = "AJET_REDTEAM_REPORT"
FULL_ENV = "AJET_REDTEAM"

full = pytest.mark.skipif(os.environ.get(FULL_ENV) != "full", reason="part of the full red team: make redteam")


def record(case: str, tried: str, count: int, result: str, *, passed: bool) -> None:
    """One row: `case` (the defence), `tried` (the attack), `count` (how many attempts), `result` (what was seen)."""
    path = os.environ.get(REPORT_ENV)
    if not path:
        return
    row = {"case": case, "tried": tried, "count": count, "result": result, "passed": passed, "at": time.time()}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
