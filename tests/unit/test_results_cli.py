"""`ajet-runner results` through the installed console script, as users and programs call it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
# The console script of the interpreter running the tests (any venv, in or outside the repo).
CLI = Path(sys.executable).with_name("ajet-runner")
CORPUS = REPO / "tests" / "corpus" / "results"


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    if not CLI.exists():
        pytest.fail(f"console script missing: {CLI} (pip install -e . into the venv of {sys.executable})")
    return subprocess.run(
        [str(CLI), "results", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "120", "NO_COLOR": "1"},
    )


def test_json_contract_for_a_classic_file() -> None:
    proc = run(CORPUS / "classic_math.md", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert {"evaluations", "final", "best", "skipped"} <= set(data)
    assert [e["step"] for e in data["evaluations"]] == [0, 10, 20, 30, 40, 50]
    first = data["evaluations"][0]
    assert set(first) == {"step", "dataset", "metrics"}
    assert first["dataset"] == "main_val_dataset" and first["metrics"]["num_pass_n_tasks"] == 1042.0
    assert data["final"]["step"] == 50 and data["final"]["dataset"] == "main_val_dataset"
    assert data["final"]["metrics"]["mean_reward"] == 0.8066717210007582
    assert data["best"]["mean_reward"] == {"value": 0.8108415466262319, "step": 40}
    assert data["baseline"]["step"] == 0 and data["skipped"] == 0


def test_json_nan_is_null_and_truncation_is_counted() -> None:
    data = json.loads(run(CORPUS / "newer_trainer.md", "--json").stdout)
    assert data["evaluations"][1]["metrics"]["std_reward"] is None
    data = json.loads(run(CORPUS / "swarm_truncated.md", "--json").stdout)
    assert data["skipped"] == 1 and [e["step"] for e in data["evaluations"]] == [0, 5]


def test_result_dir_is_searched(tmp_path: Path) -> None:
    (tmp_path / "saved_val_result").mkdir()
    shutil.copy(CORPUS / "swarm_two_sets.md", tmp_path / "saved_val_result" / "val.md")
    shutil.copy(CORPUS / "train_results.md", tmp_path / "train.md")
    (tmp_path / "experiment_report.md").write_text("{'global_steps': 0, 'mean_reward': 0.9}\n")
    data = json.loads(run(tmp_path, "--json").stdout)
    assert data["files"] == [str(tmp_path / "saved_val_result" / "val.md")]
    assert data["datasets"] == ["AIME-2025", "DAPO-Math-Tiny-Val"]
    assert data["final"]["metrics"]["task_pass_rate@1"] == 0.1917


def test_table_output() -> None:
    proc = run(CORPUS / "swarm_two_sets.md")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "DAPO-Math-Tiny-Val" in out and "pass@4" in out and "0.6625" in out
    assert "final step 20 (AIME-2025)" in out
    assert "mean_reward: 0.2000 at step 10" in out
    assert "task_pass_rate@1: 0.1917  (+0.0334 since step 0)" in out


def test_missing_path_exits_2(tmp_path: Path) -> None:
    proc = run(tmp_path / "nope.md", "--json")
    assert proc.returncode == 2
    assert "no such file or directory" in proc.stderr and proc.stdout == ""


def test_dir_without_results_exits_1(tmp_path: Path) -> None:
    (tmp_path / "notes.md").write_text("# nothing here\n")
    proc = run(tmp_path)
    assert proc.returncode == 1 and "no validation result file" in proc.stderr


def test_a_collected_result_dir_shows_what_its_report_showed(tmp_path: Path) -> None:
    """results.json is the report's own data: shown as is, even where the logs would say more (an
    earlier run's lines the report left out, for instance); non-finite values stay null."""
    from tests.conftest import CORPUS as ALL_CORPORA

    (tmp_path / "logs").mkdir()
    shutil.copy(ALL_CORPORA / "console" / "agentjet-0.0.1-test_freq1.log", tmp_path / "logs" / "attempt-1.log")
    doc = {"evaluations": [{"step": 0, "dataset": "", "metrics": {"mean_reward": 0.25, "std_reward": None}},
                           {"step": 5, "dataset": "", "metrics": {"mean_reward": 0.5, "std_reward": 0.1}}],
           "final": {"step": 5, "dataset": "", "metrics": {"mean_reward": 0.5, "std_reward": 0.1}},
           "best": {"mean_reward": {"value": 0.5, "step": 5}}}
    (tmp_path / "results.json").write_text(json.dumps(doc))
    data = json.loads(run(tmp_path, "--json").stdout)
    assert data["evaluations"] == doc["evaluations"] and data["final"] == doc["final"]
    assert data["best"] == doc["best"] and data["files"] == [str(tmp_path / "results.json")]
    assert "files: " + str(tmp_path / "results.json") in run(tmp_path).stdout
    (tmp_path / "results.json").unlink()  # not collected (yet): the same sources the report reads
    data = json.loads(run(tmp_path, "--json").stdout)
    assert [e["step"] for e in data["evaluations"]] == [0, 1, 2, 3, 4, 5, 6] and data["format"] == "console"
    (tmp_path / "results.json").write_text("{not json")
    broken = run(tmp_path)
    assert broken.returncode == 1 and "results.json: unreadable" in broken.stderr
