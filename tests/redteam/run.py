"""`make redteam`: every red-team case with real processes, then the table: what was tried, how many, the result.

Runs tests/redteam with AJET_REDTEAM=full (the fast cases also run in `make test`; the full ones need
a real run, Chromium, or a worker) and prints one row per case from what the tests recorded
(tests/redteam/record.py). Exit status: pytest's, or 1 when a row failed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="ajet-redteam-") as tmp:
        report = Path(tmp) / "rows.jsonl"
        env = {**os.environ, "AJET_REDTEAM": "full", "AJET_REDTEAM_REPORT": str(report)}
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "tests/redteam", *argv],
                              cwd=REPO, env=env, check=False)
        seconds = time.monotonic() - started
        rows = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    table = Table(title=f"make redteam ({len(rows)} rows, {seconds:.0f} s)")
    for name in ("case", "tried", "how many", "result", ""):
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(row["case"], row["tried"], str(row["count"]), row["result"],
                      "PASS" if row["passed"] else "[red]FAIL[/]")
    Console(width=160).print(table)
    failed = [r for r in rows if not r["passed"]]
    if done.returncode == 0 and not failed:
        print(f"red team: all {len(rows)} rows pass")
        return 0
    print(f"red team: {len(failed)} row(s) failed, pytest exit {done.returncode}")
    return done.returncode or 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
