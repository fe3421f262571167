"""Swarm results discovery without `[exp_val_result_path]`: markdown files under the result dir and
the codebase's `*_swarm_results/` folders, created or grown after launch, read from their launch size."""

from __future__ import annotations

import os
from pathlib import Path

from ajet_runner.statemachine.models import Blueprint
from ajet_runner.workers.swarm.found_results import SwarmResults, candidate_files, snapshot


def block(step: int, rate: float) -> str:
    return f"## Step {step}\n- dataset: dev\n- pass@1: {rate}%\n\n"


def _bp(tmp_path: Path) -> Blueprint:
    code, results = tmp_path / "code", tmp_path / "results"
    (code / "appworld_swarm_results").mkdir(parents=True)
    (code / "notes").mkdir()
    (results / "previous").mkdir(parents=True)
    return Blueprint(exp_purpose="p", exp_codebase_dir=str(code), exp_venv_exe="/usr/bin/python3",
                     exp_launch_command="python -m x", exp_result_dir=str(results))


def test_candidates_are_markdown_in_the_result_dir_and_swarm_results_folders(tmp_path: Path) -> None:
    bp = _bp(tmp_path)
    code, results = Path(bp.exp_codebase_dir), Path(bp.exp_result_dir)
    for path in (code / "appworld_swarm_results" / "val.md", code / "notes" / "x.md", code / "README.md",
                 results / "sub" / "deep" / "val.md", results / "previous" / "old.md",
                 results / "experiment_report.md", results / "logs" / "attempt-1.log"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block(0, 1))
    assert candidate_files(bp) == [code / "appworld_swarm_results" / "val.md", results / "sub" / "deep" / "val.md"]


def test_only_what_was_created_or_grew_after_launch_counts(tmp_path: Path) -> None:
    bp = _bp(tmp_path)
    folder = Path(bp.exp_codebase_dir) / "appworld_swarm_results"
    grown, untouched = folder / "val.md", folder / "older.md"
    grown.write_text(block(0, 99) + block(8, 99))
    untouched.write_text(block(0, 98))
    starts = snapshot(bp)
    found = SwarmResults(bp, starts)
    assert found.own_files() == [] and found.summary()[0] is None
    with grown.open("a") as fh:
        fh.write(block(0, 20) + block(2, 40))
    new = Path(bp.exp_result_dir) / "out" / "val.md"
    new.parent.mkdir()
    new.write_text(block(4, 60))
    files = dict(found.own_files())
    assert files == {grown: len(block(0, 99) + block(8, 99)), new: 0}
    summary, where = found.summary()
    assert summary is not None
    steps = sorted((e.step, round(e.metrics["task_pass_rate@1"], 4)) for e in summary.evaluations)
    assert steps == [(0, 0.2), (2, 0.4), (4, 0.6)]  # never the earlier run's 99 % nor its step 8
    assert "older.md" not in where and f"after its first {files[grown]} bytes" in where
    assert str(new) in starts  # recorded as ours from byte 0, across attempts and restarts


def test_a_file_replaced_since_launch_is_read_whole(tmp_path: Path) -> None:
    bp = _bp(tmp_path)
    path = Path(bp.exp_codebase_dir) / "appworld_swarm_results" / "val.md"
    path.write_text(block(0, 99) * 3)
    found = SwarmResults(bp, snapshot(bp))
    os.unlink(path)
    path.write_text(block(0, 30))  # a new file (new inode), shorter than the launch size
    summary, _ = found.summary()
    assert summary is not None and [round(e.metrics["pass@1"], 4) for e in summary.evaluations] == [0.3]
