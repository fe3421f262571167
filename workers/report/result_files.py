"""Writing everything a user gets, in the one order that matters: report, repair log, `finish.flag`.

`finish.flag` is what a person (or a research agent) waits for, so it is written after every text
file, and always: when the report could not be written (a full disk, a result dir outside the
allowed roots) the flag still comes, saying `failed`. In the driver's path the plot — ~0.4 s of
matplotlib on a loaded node — is drawn right after the flag (the record turns `finished` only once it
is there); the report already names it, and is rewritten with the reason should the drawing fail.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ajet_runner.resultdir.flag import write_finish_flag
from ajet_runner.workers.report import ReportData, write_report
from ajet_runner.workers.report.plot import Background
from ajet_runner.workers.report.repair_log import write_repair_log
from ajet_runner.workers.report.write import draw_plot, plan_plot, write_texts

log = logging.getLogger(__name__)


def write_result_files(data: ReportData, *, flag: bool = True) -> dict[str, Path]:
    """Everything a user gets, in the order that matters: report, repair log, then `finish.flag` last."""
    written = write_report(data)
    written["repair_log"] = write_repair_log(data.result_dir, data)
    if flag:
        written["flag"] = write_finish_flag(data.result_dir, data.id, data.outcome, data.finished_at)
    return written


def finish_result_dir(result_dir: str, exp_id: str, outcome: str, make_data: Callable[[], ReportData],
                      plot_background: Callable[[], Background | None] | None = None) -> OSError | None:
    """The driver's end of a run: `make_data` (which may itself write, e.g. keep the patched config),
    the report's texts, the repair log, then `finish.flag` — "failed" when anything before it failed —
    then the plot. Returns the first OSError (None when everything was written); never raises one.
    `plot_background`: gives the plot drawn while the run was watched (asked only after the flag)."""
    failure: OSError | None = None
    data: ReportData | None = None
    plot_note = "not drawn"
    try:
        data = make_data()
        evals, plot_note = plan_plot(data)
        write_texts(data, evals, plot_note)
        write_repair_log(result_dir, data)
    except OSError as exc:
        failure = exc
    try:
        # A run whose results could not be written is not "completed": the flag says failed.
        write_finish_flag(result_dir, exp_id, "failed" if failure else outcome)
    except OSError as exc:
        failure = failure or exc
    if failure is None and data is not None and not plot_note:
        _plot_after_flag(data, evals, plot_background)
    return failure


def _plot_after_flag(data: ReportData, evals: list[Any], background: Callable[[], Background | None] | None) -> None:
    """The plot the report names; if it cannot be drawn, the report and results.json say why instead.
    The flag already holds the outcome, so a failure here is logged, not turned into another outcome."""
    note = draw_plot(data, evals, background() if background is not None else None)
    if not note:
        return
    try:
        write_texts(data, evals, note)
    except OSError as exc:
        log.warning("%s: the plot could not be drawn (%s) and the report could not say so: %s", data.id, note, exc)
