"""Writing everything a user gets, in the one order that matters: report, repair log, `finish.flag` last.

`finish.flag` is what a person (or a research agent) waits for, so it is written after every other
file, and always: when the report could not be written (a full disk, a result dir outside the
allowed roots) the flag still comes, saying `failed`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ajet_runner.resultdir.flag import write_finish_flag
from ajet_runner.workers.report import ReportData, write_report
from ajet_runner.workers.report.plot import Background
from ajet_runner.workers.report.repair_log import write_repair_log


def write_result_files(data: ReportData, *, flag: bool = True) -> dict[str, Path]:
    """Everything a user gets, in the order that matters: report, repair log, then `finish.flag` last."""
    written = write_report(data)
    written["repair_log"] = write_repair_log(data.result_dir, data)
    if flag:
        written["flag"] = write_finish_flag(data.result_dir, data.id, data.outcome, data.finished_at)
    return written


def finish_result_dir(result_dir: str, exp_id: str, outcome: str, make_data: Callable[[], ReportData],
                      plot_background: Background | None = None) -> OSError | None:
    """The driver's end of a run: `make_data` (which may itself write, e.g. keep the patched config),
    the report files, then `finish.flag` — "failed" when anything before it failed. Returns the first
    OSError (None when everything was written); never raises one. `plot_background`: see write_report."""
    failure: OSError | None = None
    try:
        data = make_data()
        write_report(data, plot_background)
        write_repair_log(result_dir, data)
    except OSError as exc:
        failure = exc
    try:
        # A run whose results could not be written is not "completed": the flag says failed.
        write_finish_flag(result_dir, exp_id, "failed" if failure else outcome)
    except OSError as exc:
        failure = failure or exc
    return failure
