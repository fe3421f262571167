"""The report and `finish.flag` of a blueprint refused before it ran.

A client waiting for `finish.flag` must never wait for ever, also when the blueprint is
refused up front (by `run`, `submit` or the API): when its result dir is known and
writable it gets an `experiment_report.md` naming every problem by field, and a
`finish.flag` with outcome `failed`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

from ajet_runner.resultdir.archive import archive_previous_run
from ajet_runner.resultdir.confined import atomic_write_text, make_dir
from ajet_runner.resultdir.flag import iso_utc, write_finish_flag
from ajet_runner.resultdir.names import REPORT_NAME
from ajet_runner.statemachine.models import Problem


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def refusal_report(exp_id: str, purpose: str, problems: Sequence[Problem], blueprint_path: str, now: float,
                   previous: str = "") -> str:
    """The markdown of a refused blueprint's report: why, field by field."""
    errors = [p for p in problems if p.level.value == "error"]
    lines = [
        f"# Experiment report: {_cell(purpose) or 'untitled'}",
        "",
        "**Outcome: failed** — the blueprint was refused before launch; nothing ran.",
        "",
        f"- Experiment: `{exp_id}`",
        f"- Refused at: {iso_utc(now)}",
    ]
    if blueprint_path:
        lines.append(f"- Blueprint: `{blueprint_path}`")
    if previous:
        lines.append(f"- An earlier run's files were moved to [{previous}]({previous}/)")
    lines += ["", f"## Why ({len(errors)} error(s))", "", "| level | field | problem |", "|---|---|---|"]
    for p in problems:
        lines.append(f"| {p.level.value} | `{_cell(p.field)}` | {_cell(p.message)} |")
    lines += ["", "Fix the fields above and submit the blueprint again; "
              "`ajet-runner check BLUEPRINT` shows the same list.", ""]
    return "\n".join(lines)


def writable_result_dir(path: str) -> bool:
    """An absolute dir that exists and is writable, or can be created under a writable parent."""
    if not path or not os.path.isabs(path):
        return False
    probe = Path(path)
    while not probe.exists():
        if probe.parent == probe:
            return False
        probe = probe.parent
    return probe.is_dir() and os.access(probe, os.W_OK | os.X_OK)


def write_refusal(result_dir: str, exp_id: str, purpose: str, problems: Sequence[Problem], *,
                  blueprint_path: str = "", codebase: str = "") -> bool:
    """Write the refusal report and `finish.flag` (outcome failed); False when the dir is unusable.

    Nothing is written when a problem concerns the result dir itself (e.g. outside the
    allowed roots): a refused path is never written to.
    """
    if any(p.field == "exp_result_dir" for p in problems) or not writable_result_dir(result_dir):
        return False
    now = time.time()
    try:
        make_dir(result_dir)
        previous = archive_previous_run(result_dir, codebase)
        atomic_write_text(Path(result_dir) / REPORT_NAME,
                          refusal_report(exp_id, purpose, problems, blueprint_path, now, previous))
        write_finish_flag(result_dir, exp_id, "failed", now)
    except OSError:
        return False
    return True
