"""A results file shared with earlier runs: only what this run wrote after launch counts."""

from __future__ import annotations

import os
from pathlib import Path

from ajet_runner.workers.watching.watch import file_start, own_offset, parse_own_results


def line(step: int, reward: float) -> str:
    return f"{{'global_steps': {step}, 'mean_reward': {reward}, 'target_dataset_name': 'main'}}\n"


def test_lines_before_launch_are_not_this_runs(tmp_path: Path) -> None:
    val = tmp_path / "val.md"
    val.write_text(line(0, 0.9) + line(10, 0.95))
    start = file_start(val)
    assert start["offset"] == val.stat().st_size
    assert parse_own_results(val, start).evaluations == []
    with val.open("a") as fh:
        fh.write(line(0, 0.3) + line(2, 0.4))  # attempt 1
    with val.open("a") as fh:
        fh.write(line(2, 0.41) + line(4, 0.5))  # a relaunch after a repair keeps counting
    got = parse_own_results(val, start)
    assert [(e.step, e.metrics["mean_reward"]) for e in got.evaluations] == [(0, 0.3), (2, 0.41), (4, 0.5)]


def test_a_replaced_or_truncated_file_is_read_from_its_start(tmp_path: Path) -> None:
    val = tmp_path / "val.md"
    val.write_text(line(0, 0.9) * 5)
    start = file_start(val)
    val.write_text(line(0, 0.2))  # truncated in place: shorter than the recorded offset
    assert [e.step for e in parse_own_results(val, start).evaluations] == [0] and start["offset"] == 0
    start = file_start(val)
    fresh = tmp_path / "new.md"
    fresh.write_text(line(0, 0.1) + line(2, 0.2) + line(4, 0.3))
    os.replace(fresh, val)  # replaced by a new file (new inode), even a longer one
    assert own_offset(val, start) == 0
    assert [e.step for e in parse_own_results(val, start).evaluations] == [0, 2, 4]


def test_a_file_created_after_launch_is_all_this_runs(tmp_path: Path) -> None:
    val = tmp_path / "later.md"
    start = file_start(val)
    assert start == {"inode": 0, "offset": 0}
    val.write_text(line(0, 0.3))
    assert [e.step for e in parse_own_results(val, start).evaluations] == [0]
    assert start["inode"] == val.stat().st_ino
