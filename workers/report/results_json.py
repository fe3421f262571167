"""`results.json`: ReportData's fields plus computed ones, strict JSON."""

from __future__ import annotations

import math
from enum import Enum
from typing import Any

from ajet_runner.resultdir.flag import iso_utc
from ajet_runner.workers.report.data import (
    PLOT_NAME,
    REPAIR_LOG_NAME,
    REPORT_NAME,
    REPORT_VERSION,
    RESULTS_NAME,
    ReportData,
)
from ajet_runner.workers.report.evaluations import Eval, changes_since_baseline
from ajet_runner.workers.report.markdown import finite
from ajet_runner.workers.report.sections import ReportContext


def json_safe(value: Any) -> Any:
    """JSON-able data: non-finite floats become null (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Enum):
        return json_safe(value.value)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def _iso(epoch: float | None) -> str | None:
    """A finite time as ISO-8601 UTC, else None (never a made-up date)."""
    at = finite(epoch)
    return iso_utc(at) if at is not None else None


def results_document(data: ReportData, evals: list[Eval], plot_written: bool, now: float) -> dict[str, Any]:
    """ReportData's fields at the top level (so `ReportData.model_validate` reads it back) plus computed ones."""
    elapsed = ReportContext(data=data, evals=evals, now=now, plot_note="").elapsed
    doc: dict[str, Any] = {"report_version": REPORT_VERSION, **data.model_dump()}
    doc.update(
        generated_at=iso_utc(now),
        generated_at_epoch=now,
        created_at_iso=_iso(data.created_at),
        started_at_iso=_iso(data.started_at),
        finished_at_iso=_iso(data.finished_at),
        elapsed_seconds=elapsed,
        attempt_count=len(data.attempts),
        repair_count=len(data.repairs),
        evaluation_count=len(evals),
        datasets=list(dict.fromkeys(e.dataset for e in evals)),
        changes_since_baseline=changes_since_baseline(evals),
        files={
            "report": REPORT_NAME,
            "results": RESULTS_NAME,
            "repair_log": REPAIR_LOG_NAME,
            "plot": PLOT_NAME if plot_written else None,
        },
    )
    return json_safe(doc)
