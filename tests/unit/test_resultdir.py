"""Result dir reuse: an earlier run's files moved to previous/, the refusal report and flag."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ajet_runner.resultdir.archive import archive_previous_run, earlier_run_files
from ajet_runner.resultdir.confined import SymlinkRefused
from ajet_runner.resultdir.refusal import write_refusal
from ajet_runner.resultdir.roots import confined, parse_roots
from ajet_runner.statemachine.models import Level, Problem


def earlier_run(d: Path, finished_at: str = "2026-11-30T10:20:30Z") -> None:
    (d / "logs").mkdir(parents=True)
    (d / "logs" / "attempt-1.log").write_text("old log\n")
    (d / "experiment_report.md").write_text("old report\n")
    (d / "my_notes.txt").write_text("a person's file\n")
    (d / "finish.flag").write_text(json.dumps({"id": "old", "outcome": "completed", "finished_at": finished_at}))


def test_everything_of_an_earlier_run_moves_to_previous_named_by_its_finish_time(tmp_path: Path) -> None:
    earlier_run(tmp_path)
    moved = archive_previous_run(tmp_path)
    assert moved == "previous/2026-11-30T10-20-30Z"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["previous"]
    old = tmp_path / moved
    assert (old / "logs" / "attempt-1.log").read_text() == "old log\n" and (old / "my_notes.txt").exists()
    assert archive_previous_run(tmp_path) == ""  # nothing left to move
    earlier_run(tmp_path)  # the same finish time again: never overwrites
    assert archive_previous_run(tmp_path) == "previous/2026-11-30T10-20-30Z-1"


def test_a_dir_without_runner_files_or_holding_the_codebase_keeps_foreign_files(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("x\n")
    assert earlier_run_files(tmp_path) == [] and archive_previous_run(tmp_path) == ""
    earlier_run(tmp_path)
    (tmp_path / "code").mkdir()
    assert earlier_run_files(tmp_path, codebase=str(tmp_path / "code")) == [
        "experiment_report.md", "finish.flag", "logs"]
    without_flag = tmp_path / "noflag"
    (without_flag / "logs").mkdir(parents=True)
    assert archive_previous_run(without_flag).startswith("previous/")  # a timestamp name


def test_a_refused_blueprint_gets_a_report_field_by_field_and_a_failed_flag(tmp_path: Path) -> None:
    result = tmp_path / "results"
    earlier_run(result)
    problems = [Problem(level=Level.error, field="exp_venv_exe", message="the python executable /x does not exist"),
                Problem(level=Level.warning, field="exp_purpose", message="exp_purpose is missing")]
    assert write_refusal(str(result), "abc123", "try", problems, blueprint_path="/bp.md")
    flag = json.loads((result / "finish.flag").read_text())
    assert flag["id"] == "abc123" and flag["outcome"] == "failed"
    report = (result / "experiment_report.md").read_text()
    assert "refused before launch" in report and "`exp_venv_exe`" in report and "/x does not exist" in report
    assert "previous/2026-11-30T10-20-30Z" in report  # the earlier run was moved, not overwritten
    assert (result / "previous/2026-11-30T10-20-30Z/experiment_report.md").read_text() == "old report\n"


def test_a_refusal_never_writes_into_a_refused_or_unusable_result_dir(tmp_path: Path) -> None:
    outside = [Problem(level=Level.error, field="exp_result_dir", message="outside the allowed roots")]
    assert not write_refusal(str(tmp_path / "r"), "i", "p", outside)
    assert not (tmp_path / "r").exists()
    assert not write_refusal("relative/dir", "i", "p", [])
    (tmp_path / "file").write_text("")
    assert not write_refusal(str(tmp_path / "file" / "r"), "i", "p", [])


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


@pytest.mark.parametrize("roots", [False, True], ids=["no roots", "confined"])
def test_a_previous_symlink_is_refused_with_the_reason_and_nothing_moves_anywhere(tmp_path: Path, roots: bool) -> None:
    result, outside = tmp_path / "root" / "results", tmp_path / "outside"
    earlier_run(result)
    outside.mkdir()
    (result / "previous").symlink_to(outside, target_is_directory=True)
    before = _tree(result)
    with confined(parse_roots(str(tmp_path / "root")) if roots else ()), \
            pytest.raises(SymlinkRefused, match=r"previous is a symlink \(to .*outside\)") as refused:
        archive_previous_run(result)
    assert "never follows a link" in str(refused.value)
    assert _tree(outside) == [] and _tree(result) == before  # nothing written outside, nothing moved inside


def test_a_stamp_dir_swapped_for_a_symlink_is_never_followed(tmp_path: Path) -> None:
    result, outside = tmp_path / "results", tmp_path / "outside"
    earlier_run(result)
    outside.mkdir()
    (result / "previous").mkdir()
    (result / "previous" / "2026-11-30T10-20-30Z").symlink_to(outside, target_is_directory=True)  # planted name
    assert archive_previous_run(result) == "previous/2026-11-30T10-20-30Z-1"
    assert _tree(outside) == [] and (result / "previous/2026-11-30T10-20-30Z-1/finish.flag").exists()


def test_a_symlinked_flag_is_moved_as_the_link_and_never_read_through(tmp_path: Path) -> None:
    result, secret = tmp_path / "results", tmp_path / "secret.json"
    secret.write_text(json.dumps({"finished_at": "2030-01-01T00:00:00Z"}))
    (result / "logs").mkdir(parents=True)
    (result / "finish.flag").symlink_to(secret)
    moved = archive_previous_run(result)
    assert moved != "previous/2030-01-01T00-00-00Z"  # the stamp never came from the link's target
    assert (result / moved / "finish.flag").is_symlink() and secret.read_text().startswith("{")
