"""`finish.flag` comes last and always: workers/result_files.finish_result_dir."""

from __future__ import annotations

import errno
import json
from pathlib import Path

from ajet_runner.workers.report import REPAIR_LOG_NAME, REPORT_NAME, RESULTS_NAME, ReportData
from ajet_runner.workers.report.result_files import finish_result_dir


def _flag(result_dir: Path) -> dict:
    return json.loads((result_dir / "finish.flag").read_text())


def test_the_flag_is_written_after_every_other_file(tmp_path: Path) -> None:
    out = tmp_path / "r"
    failure = finish_result_dir(str(out), "e1", "completed", lambda: ReportData(id="e1", result_dir=str(out),
                                                                                  outcome="completed"))
    assert failure is None and _flag(out)["outcome"] == "completed"
    flag_at = (out / "finish.flag").stat().st_mtime_ns
    assert all((out / name).stat().st_mtime_ns <= flag_at for name in (REPORT_NAME, RESULTS_NAME, REPAIR_LOG_NAME))


def test_a_report_that_cannot_be_written_still_ends_in_a_failed_flag(tmp_path: Path) -> None:
    out = tmp_path / "r"

    def full_disk() -> ReportData:
        raise OSError(errno.ENOSPC, "No space left on device")

    failure = finish_result_dir(str(out), "e1", "completed", full_disk)
    assert isinstance(failure, OSError) and failure.errno == errno.ENOSPC
    assert _flag(out)["outcome"] == "failed" and not (out / REPORT_NAME).exists()


def test_a_flag_that_cannot_be_written_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    failure = finish_result_dir(str(blocker / "r"), "e1", "completed",
                                lambda: ReportData(id="e1", result_dir=str(blocker / "r")))
    assert isinstance(failure, OSError)
