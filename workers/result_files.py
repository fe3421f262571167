"""Writing everything a user gets, in the one order that matters: `finish.flag` last."""

from __future__ import annotations

from pathlib import Path

from workers.finish import write_finish_flag
from workers.repair_log import write_repair_log
from workers.report import ReportData, write_report


def write_result_files(data: ReportData, *, flag: bool = True) -> dict[str, Path]:
    """Everything a user gets, in the order that matters: report, repair log, then `finish.flag` last."""
    written = write_report(data)
    written["repair_log"] = write_repair_log(data.result_dir, data)
    if flag:
        written["flag"] = write_finish_flag(data.result_dir, data.id, data.outcome, data.finished_at)
    return written
