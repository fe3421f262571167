"""`finish.flag` comes after every text file and always: workers/result_files.finish_result_dir. The plot
(~0.4 s of matplotlib) is drawn right after the flag, off the path people wait on (issue 39 item 3)."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from ajet_runner.workers.report import PLOT_NAME, REPAIR_LOG_NAME, REPORT_NAME, RESULTS_NAME, ReportData
from ajet_runner.workers.report import plot as plot_module
from ajet_runner.workers.report.result_files import finish_result_dir
from tests.unit.test_report import completed_run


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


def test_the_plot_the_report_names_is_drawn_after_the_flag(tmp_path: Path) -> None:
    asked: list[float] = []

    def background() -> None:
        asked.append((tmp_path / "finish.flag").stat().st_mtime_ns)  # the flag is there when the plot starts
        return None

    assert finish_result_dir(str(tmp_path), "exp-math-lr", "completed", lambda: completed_run(tmp_path),
                             background) is None
    flag_at = (tmp_path / "finish.flag").stat().st_mtime_ns
    assert asked == [flag_at] and (tmp_path / PLOT_NAME).stat().st_mtime_ns >= flag_at
    assert json.loads((tmp_path / RESULTS_NAME).read_text())["files"]["plot"] == PLOT_NAME
    assert "No plot" not in (tmp_path / REPORT_NAME).read_text()


def test_a_plot_that_fails_after_the_flag_leaves_a_report_saying_why(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / PLOT_NAME).write_bytes(b"an earlier run's plot")

    def broken(*_a: object) -> bytes:
        raise RuntimeError("no fonts")

    monkeypatch.setattr(plot_module, "render_png", broken)
    assert finish_result_dir(str(tmp_path), "exp-math-lr", "completed", lambda: completed_run(tmp_path)) is None
    assert _flag(tmp_path)["outcome"] == "completed" and not (tmp_path / PLOT_NAME).exists()
    assert json.loads((tmp_path / RESULTS_NAME).read_text())["files"]["plot"] is None
    assert "the plot could not be drawn (RuntimeError: no fonts)" in (tmp_path / REPORT_NAME).read_text()
