"""`repair_log.md`: the trial-and-error document a person kept, one entry per failure, in order
(docs/background.md#manual-workflow).

A person reading it should be able to redo or undo every change the runner made: what
was changed before the first launch and why, then for each failure the log lines that
showed it, the diagnosis, the exact change (list and YAML diff), where the fix came
from, and what the next attempt did. Written even when nothing failed.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from ajet_runner.resultdir.flag import atomic_write_text
from ajet_runner.statemachine.fixes.failure import RepairResult
from ajet_runner.workers.report import (
    NA,
    REPAIR_LOG_NAME,
    REPORT_NAME,
    AttemptInfo,
    RepairRecord,
    ReportData,
    code_span,
    fenced,
    finite,
    fmt_duration,
    fmt_time,
    md_cell,
    repair_next,
    repair_summary,
)
from ajet_runner.workers.report.repair_log_section import swarm_server_section

SOURCES = {
    "catalogue": "the runner's catalogue of known failures",
    "hook": "a site repair hook",
    "adviser": "the LLM repair adviser",
    "none": "no repair was found",
}


def _preflight_changes(data: ReportData, changes: list[dict[str, Any]]) -> list[str]:
    """Each setting the preflight changed, old → new with why, and the YAML the run used."""
    kept = f" ({code_span(data.yaml_path)})" if data.yaml_path else ""
    lines = [f"The preflight changed {len(changes)} setting(s); the original YAML{kept} was left as it was.", ""]
    for ch in changes:
        old = ch.get("old", "(unset)")
        new = ch.get("new", "(unset)")
        reason = md_cell(ch.get("reason", ""), 1000)
        lines.append(f"- {code_span(ch.get('key', NA))}: {code_span(old)} → {code_span(new)}"
                     + (f" — {reason}" if reason else ""))
    if data.patched_yaml_path:
        lines += ["", f"The run used {code_span(data.patched_yaml_path)}."]
    return lines


def _preflight(data: ReportData) -> list[str]:
    lines = ["## Before the first launch (preflight)", ""]
    changes = [c for c in data.preflight_changes if isinstance(c, dict)]
    if changes:
        lines += _preflight_changes(data, changes)
    elif data.launcher_hidden:
        lines.append(f"No preflight change applied: {md_cell(data.launcher_hidden, 1000)}.")
    else:
        lines.append("The preflight changed nothing.")
    problems = [p for p in data.preflight_problems if isinstance(p, dict)]
    if problems:
        lines += ["", "Problems it reported:", ""]
        lines += [f"- **{md_cell(p.get('level', '?'))}** {code_span(p.get('field', '?'))}: "
                  f"{md_cell(p.get('message', ''), 1000)}" for p in problems]
    return lines + [""]


def _attempt(data: ReportData, number: int) -> AttemptInfo | None:
    return next((a for a in data.attempts if a.number == number), None)


def _failure_when(data: ReportData, record: RepairRecord) -> str:
    """When the failure was recorded, and how long after the first launch."""
    when = fmt_time(record.at)
    start = finite(data.started_at)
    at = finite(record.at)
    if start is not None and at is not None and at >= start:
        when += f" ({fmt_duration(at - start)} after the first launch)"
    return when


def _attempt_end(data: ReportData, record: RepairRecord) -> list[str]:
    attempt = _attempt(data, record.attempt)
    if attempt is None:
        return []
    exit_code = NA if attempt.exit_code is None else str(attempt.exit_code)
    return [f"- **Attempt end:** {md_cell(attempt.end_reason or NA)} (exit code {exit_code})"]


def _failure(data: ReportData, index: int, record: RepairRecord) -> list[str]:
    lines = [f"### {index}. Attempt {record.attempt} failed — {_failure_when(data, record)}", ""]
    lines += _attempt_end(data, record)
    diagnosis = code_span(record.signature or "unknown")
    if record.explanation.strip():
        diagnosis += f" — {md_cell(record.explanation, 1000)}"
    source = record.source or "none"
    lines += [
        f"- **Diagnosis:** {diagnosis}",
        f"- **Source of the fix:** {md_cell(source)}"
        + (f" ({SOURCES[source]})" if source in SOURCES else ""),
        f"- **Result:** {md_cell(record.result or NA)}{_identical_note(record)}",
        f"- **What happened next:** {repair_next(data, record)}",
        "",
    ]
    if record.source == "adviser":
        lines += _advice(record)
    return lines + _failure_evidence(record)


def _failure_evidence(record: RepairRecord) -> list[str]:
    """The log excerpt, what the runner changed or considered, and the YAML diff."""
    lines: list[str] = []
    if record.log_excerpt.strip():
        lines += ["Log excerpt:", "", *fenced(record.log_excerpt), ""]
    else:
        lines += ["No log excerpt was captured.", ""]
    if record.changes:
        lines += ["What the runner did:", ""] + [f"- {md_cell(change, 1000)}" for change in record.changes] + [""]
    else:
        lines += ["No change was made.", ""]
    if record.skipped:
        lines += ["Considered and not done:", ""] + [f"- {md_cell(line, 1000)}" for line in record.skipped] + [""]
    if record.diff.strip():
        lines += ["YAML diff:", "", *fenced(record.diff, "diff"), ""]
    return lines


def _identical_note(record: RepairRecord) -> str:
    """Why the record names an earlier attempt: a repeat refused, or an unchanged relaunch after a wait."""
    if record.identical_to is None or record.result is RepairResult.not_relaunched:
        return ""  # the relaunch never came: nothing was repeated, or refused for repeating
    if record.relaunched:
        return f" (unchanged after a wait: the cause is transient; same inputs as attempt {record.identical_to})"
    return f" (the next attempt would have repeated attempt {record.identical_to} exactly)"


def _advice(record: RepairRecord) -> list[str]:
    """What the adviser was told to do and why, and what the runner made of it."""
    took = f" in {fmt_duration(record.advice_seconds)}" if finite(record.advice_seconds) is not None else ""
    verdict = {"advised": "accepted", "refused": "refused by the runner", "declined": "no fix proposed",
               "no answer": "no usable answer"}.get(record.advice_result, record.advice_result or NA)
    lines = [f"Advised by {code_span(record.advised_by or NA)}{took} — {md_cell(verdict)}.", ""]
    lines += _note("Adviser's diagnosis", record.advice_diagnosis, 1000)
    lines += _note("Rationale", record.rationale, 2000)
    lines += _bullets("Proposed changes", record.advice, 500)
    lines += _bullets("Refused because", record.refused, 1000)
    if record.suggestion:
        lines += [f"- **Catalogue:** {md_cell(record.suggestion, 600)}"]
    return lines + [""]


def _note(label: str, text: str, limit: int) -> list[str]:
    """`- **label:** text`, or nothing for a blank text."""
    return [f"- **{label}:** {md_cell(text, limit)}"] if text.strip() else []


def _bullets(label: str, items: list[str], limit: int) -> list[str]:
    """`- **label:**` with one indented bullet per item, or nothing for no items."""
    return [f"- **{label}:**"] + [f"  - {md_cell(item, limit)}" for item in items] if items else []


def _guarded(render: Callable[[], list[str]], heading: str) -> list[str]:
    """A broken entry must not cost the whole log: say it could not be rendered, keep going."""
    try:
        return render()
    except Exception as exc:  # noqa: BLE001 - one broken entry must not cost the repair log
        return [heading, "", f"_This entry could not be rendered ({type(exc).__name__}: {exc})._", ""]


def closing_line(data: ReportData) -> str:
    """`Outcome: completed on attempt 2 (1 failure, 1 relaunched after a repair) — reason.`"""
    outcome = data.outcome or "unknown"
    if data.attempts:
        last = max(a.number for a in data.attempts)
        text = f"Outcome: {outcome} on attempt {last}"
    else:
        text = f"Outcome: {outcome} before the first launch"
    text += f" ({repair_summary(data)})"
    if data.reason.strip():
        text += f" — {md_cell(data.reason, 1000)}"
    return text + "."


def render_repair_log(data: ReportData) -> str:
    lines = [f"# Repair log: {md_cell(data.id)}", ""]
    if data.purpose.strip():
        lines += [f"> {md_cell(data.purpose, 600)}", ""]
    lines += [
        "Every change the runner made to get this experiment to run, and every failure, in order."
        f" The results are in [{REPORT_NAME}]({REPORT_NAME}).",
        "",
    ]
    lines += _guarded(lambda: _preflight(data), "## Before the first launch (preflight)")
    lines += _guarded(lambda: swarm_server_section(data), "## Swarm server")
    lines += ["## Failures", ""]
    records = sorted(data.repairs, key=lambda r: (finite(r.at) or 0.0, r.attempt))
    if not records:
        lines += ["No failures.", ""]
    for index, record in enumerate(records, 1):
        lines += _guarded(partial(_failure, data, index, record), f"### {index}. Failure")
    lines += ["---", "", closing_line(data)]
    return "\n".join(lines) + "\n"


def write_repair_log(result_dir: str | os.PathLike[str], data: ReportData) -> Path:
    """Write `repair_log.md` atomically into `result_dir`."""
    return atomic_write_text(Path(result_dir) / REPAIR_LOG_NAME, render_repair_log(data))
