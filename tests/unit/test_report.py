"""The files a user finds in the result dir: report, results.json, plot, repair log, finish.flag."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest

from ajet_runner.resultdir.flag import (
    FLAG_NAME,
    TEMP_PREFIX,
    atomic_write_text,
    clear_finish_flag,
    read_finish_flag,
    write_finish_flag,
)
from ajet_runner.statemachine.lifecycle import Outcome
from ajet_runner.statemachine.models import ConfigChange, Evaluation
from ajet_runner.statemachine.shell.command_file import command_script
from ajet_runner.workers.report import (
    PLOT_NAME,
    REPORT_NAME,
    RESULTS_NAME,
    AttemptInfo,
    RepairRecord,
    ReportData,
    write_report,
)
from ajet_runner.workers.report.repair_log import write_repair_log
from ajet_runner.workers.report.result_files import write_result_files

T0 = 1_735_000_000.0  # 2024-12-24 00:26:40 UTC
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _ev(step: int, dataset: str, reward: float, p1: float, p4: float, passed: int) -> dict:
    return {
        "step": step,
        "dataset": dataset,
        "metrics": {
            "pass_n": 4.0,
            "total_tasks": 1319.0,
            "num_all_success_tasks": float(passed - 200),
            "num_pass_n_tasks": float(passed),
            "task_pass_rate@1": p1,
            "task_pass_rate@2": (p1 + p4) / 2,
            "task_pass_rate@4": p4,
            "mean_reward": reward,
            "std_reward": 0.47,
        },
    }


def completed_run(result_dir: Path) -> ReportData:
    evaluations = [
        _ev(0, "main_val_dataset", 0.40, 0.40, 0.60, 900),
        _ev(0, "aux_val", 0.20, 0.20, 0.35, 300),
        _ev(10, "main_val_dataset", 0.50, 0.50, 0.70, 1000),
        _ev(20, "main_val_dataset", 0.55, 0.56, 0.75, 1050),
        _ev(20, "aux_val", 0.30, 0.31, 0.45, 400),
        _ev(30, "main_val_dataset", 0.70, 0.66, 0.83, 1101),
    ]
    log = result_dir / "attempt_1.log"
    log.write_text("training...\nFinal validation metrics: {...}\n")
    return ReportData(
        id="exp-math-lr",
        purpose="Does a 2x learning rate help GSM8K?\nSecond line of purpose.",
        node="gpu-node-1",
        tmux_session="ajet_math_lr",
        outcome="completed",
        reason="the command exited 0",
        created_at=T0,
        started_at=T0 + 5,
        finished_at=T0 + 5 + 3725,
        max_seconds=7200,
        result_dir=str(result_dir),
        blueprint_path=str(result_dir / "blueprint.md"),
        yaml_path="/code/tests/bench/math.yaml",
        patched_yaml_path=str(result_dir / "math.patched.yaml"),
        attempts=[
            AttemptInfo(number=1, started_at=T0 + 5, ended_at=T0 + 3730, exit_code=0,
                        command="python -m ajet.launcher --conf math.yaml | tee x", log_path=str(log),
                        end_reason="exited 0"),
        ],
        preflight_changes=[
            {"key": "ajet.execute_test", "old": True, "new": False, "reason": "a test probe ends training"},
        ],
        evaluations=evaluations,
        final={"step": 30, "dataset": "main_val_dataset", "metrics": evaluations[-1]["metrics"]},
        best={"mean_reward": {"value": 0.70, "step": 30}, "task_pass_rate@4": {"value": 0.83, "step": 30}},
        train_steps=30,
        log_tail=["step 30/30", "\x1b[32mFinal validation metrics: {'mean_reward': 0.7}\x1b[0m"],
        history=[
            {"at": T0, "from": "queued", "to": "launching", "trigger": "start", "reason": "", "attempt": 1},
            {"at": T0 + 5, "from": "launching", "to": "running", "trigger": "launched", "reason": "",
             "attempt": 1},
            {"at": T0 + 3730, "from": "running", "to": "collecting", "trigger": "completed",
             "reason": "exit 0 | done", "attempt": 1},
        ],
    )


def failed_run(result_dir: Path) -> ReportData:
    return ReportData(
        id="exp-oom",
        purpose="Long context ablation",
        node="gpu-node-2",
        tmux_session="ajet_long_ctx",
        outcome=Outcome.failed,  # the lifecycle's enum is accepted as is
        reason="network unreachable and proxychains is not installed",
        created_at=T0,
        started_at=T0 + 2,
        finished_at=T0 + 900,
        max_seconds=3600,
        result_dir=str(result_dir),
        yaml_path="/code/long.yaml",
        patched_yaml_path=str(result_dir / "long.patched.yaml"),
        attempts=[
            AttemptInfo(number=1, started_at=T0 + 2, ended_at=T0 + 300, exit_code=1,
                        command="python -m ajet.launcher --conf long.yaml", log_path=str(result_dir / "a1.log"),
                        end_reason="cuda_oom"),
            AttemptInfo(number=2, started_at=T0 + 320, ended_at=T0 + 890, exit_code=1,
                        command="python -m ajet.launcher --conf long.yaml", log_path=str(result_dir / "a2.log"),
                        end_reason="network"),
        ],
        preflight_changes=[
            ConfigChange(key="command", old="python -m ajet.launcher --conf long.yaml --autokill",
                         new="python -m ajet.launcher --conf long.yaml",
                         reason="--autokill kills every python process on the host"),
        ],
        preflight_problems=[{"level": "warning", "field": "ajet.trainer_common.test_freq",
                             "message": "999999 means almost never"}],
        repairs=[
            RepairRecord(
                at=T0 + 301, attempt=1, signature="cuda_oom", explanation="training ran out of GPU memory",
                log_excerpt="  File \"x.py\", line 3\ntorch.OutOfMemoryError: CUDA out of memory.",
                changes=["ajet.rollout.max_model_len: 16000 → 12000",
                         "env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"],
                diff="--- a/long.yaml\n+++ b/long.yaml\n@@ -3 +3 @@\n-    max_model_len: 16000\n"
                     "+    max_model_len: 12000\n",
                source="catalogue", result="relaunched",
            ),
            RepairRecord(
                at=T0 + 891, attempt=2, signature="network", explanation="huggingface.co unreachable",
                log_excerpt="We couldn't connect to 'https://huggingface.co'", changes=[], diff="",
                source="none", result="not repairable", next="gave up: proxychains4 is not installed",
            ),
        ],
        log_tail=["We couldn't connect to 'https://huggingface.co'", "Error running subprocess"],
    )


def timed_out_run(result_dir: Path) -> ReportData:
    nan, inf = float("nan"), float("inf")
    evaluations = [
        Evaluation(step=0, dataset="", metrics={"mean_reward": 0.1, "task_pass_rate@1": nan}),
        Evaluation(step=5, dataset="", metrics={"mean_reward": nan, "task_pass_rate@1": 0.2}),
        Evaluation(step=10, dataset="", metrics={"mean_reward": inf, "task_pass_rate@1": 0.3, "std_reward": nan}),
    ]
    return ReportData(
        id="exp-slow",
        outcome="timed_out",
        reason="time limit 1 h reached",
        created_at=T0,
        started_at=T0,
        finished_at=T0 + 3600,
        max_seconds=3600,
        result_dir=str(result_dir),
        attempts=[AttemptInfo(number=1, started_at=T0, ended_at=T0 + 3600, command="python -m ajet.launcher",
                              log_path="/elsewhere/a1.log", end_reason="stopped: time limit")],
        evaluations=evaluations,  # Evaluation models are accepted as they are
        final={"step": 10, "dataset": "", "metrics": {"mean_reward": inf, "task_pass_rate@1": 0.3}},
        best={"task_pass_rate@1": {"value": 0.3, "step": 10}, "mean_reward": nan},  # odd shape on purpose
    )


def _section(text: str, title: str) -> str:
    start = text.index(f"## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _table_rows(section: str) -> list[list[str]]:
    """Body rows of the first markdown table in `section`, as stripped cells."""
    lines = [ln for ln in section.splitlines() if ln.startswith("|")]
    return [[c.strip() for c in re.split(r"(?<!\\)\|", ln.strip().strip("|"))] for ln in lines[2:]]


def _no_temp_files(directory: Path) -> None:
    leftovers = [p.name for p in directory.iterdir() if p.name.startswith(TEMP_PREFIX)]
    assert leftovers == []


# ----------------------------------------------------------------------------- completed run


def test_completed_run_writes_every_file_and_the_flag_last(tmp_path: Path) -> None:
    data = completed_run(tmp_path)
    written = write_result_files(data)

    assert set(written) == {"plot", "results", "report", "repair_log", "flag"}
    for path in written.values():
        assert path.is_file() and path.parent == tmp_path
    flag_mtime = (tmp_path / FLAG_NAME).stat().st_mtime_ns
    for key in ("plot", "results", "report", "repair_log"):
        assert written[key].stat().st_mtime_ns <= flag_mtime, key
    assert list(written)[-1] == "flag"
    flag = json.loads((tmp_path / FLAG_NAME).read_text())
    assert {"id", "outcome", "finished_at"} <= set(flag)
    assert flag["id"] == "exp-math-lr" and flag["outcome"] == "completed"
    assert flag["finished_at"] == "2024-12-24T01:28:50Z"
    _no_temp_files(tmp_path)


def test_completed_report_has_one_row_per_evaluation_with_deltas(tmp_path: Path) -> None:
    data = completed_run(tmp_path)
    write_report(data)
    text = (tmp_path / REPORT_NAME).read_text()

    section = _section(text, "Evaluations")
    header = [c.strip() for c in next(ln for ln in section.splitlines() if ln.startswith("|")).strip("|").split("|")]
    assert header == [
        "step", "dataset", "mean_reward", "Δ mean_reward", "std_reward", "task_pass_rate@1",
        "Δ task_pass_rate@1", "task_pass_rate@2", "task_pass_rate@4",
        "num_all_success_tasks", "num_pass_n_tasks", "total_tasks",
    ]
    rows = _table_rows(section)
    assert len(rows) == 6
    assert [(r[0], r[1]) for r in rows] == [
        ("0", "main_val_dataset"), ("0", "aux_val"), ("10", "main_val_dataset"),
        ("20", "main_val_dataset"), ("20", "aux_val"), ("30", "main_val_dataset"),
    ]
    by_key = {(r[0], r[1]): dict(zip(header, r, strict=True)) for r in rows}
    assert by_key[("0", "main_val_dataset")]["Δ mean_reward"] == "baseline"
    assert by_key[("30", "main_val_dataset")]["Δ mean_reward"] == "+0.3000"
    assert by_key[("30", "main_val_dataset")]["Δ task_pass_rate@1"] == "+0.2600"
    assert by_key[("20", "aux_val")]["Δ mean_reward"] == "+0.1000"  # against aux's own step 0
    assert by_key[("30", "main_val_dataset")]["num_pass_n_tasks"] == "1101"
    assert by_key[("30", "main_val_dataset")]["total_tasks"] == "1319"
    assert "mean_reward on `main_val_dataset`: 0.4000 (step 0) → 0.7000 (step 30), change +0.3000" in section

    best_final = _section(text, "Best and final values")
    rows = {r[0]: r for r in _table_rows(best_final)}
    assert rows["`mean_reward`"][1:] == ["0.7000", "0.7000", "30"]
    assert rows["`task_pass_rate@4`"][1:] == ["0.8300", "0.8300", "30"]
    assert "step 30" in best_final

    assert f"![mean_reward and task_pass_rate@k over steps]({PLOT_NAME})" in text
    assert "`tmux attach -t ajet_math_lr`" in text and "gpu-node-1" in text
    assert "**completed** — the command exited 0" in text
    assert "1h 02m" in text and "2h (52% used)" in text
    assert "> Does a 2x learning rate help GSM8K?" in text
    assert "[attempt_1.log](<attempt_1.log>)" in text  # logs inside the result dir are linked
    assert "Command file as run (attempt 1):\n\n```bash\n# ajet-runner: the launch command" in text
    assert "\npython -m ajet.launcher --conf math.yaml | tee x\n```" in text
    timeline = _table_rows(_section(text, "Lifecycle timeline"))
    assert timeline[2] == [  # a pipe inside a cell is escaped, the row keeps its 6 cells
        "2024-12-24 01:28:50 UTC", "1h 02m", "running → collecting", "completed", "1", "exit 0 \\| done"
    ]
    assert "| `ajet.execute_test` | `True` | `False` | a test probe ends training |" in text
    assert "queued → launching" in text and "running → collecting" in text
    tail = _section(text, "Log tail")
    assert "Final validation metrics: {'mean_reward': 0.7}" in tail and "\x1b" not in text


def test_completed_plot_is_a_real_png(tmp_path: Path) -> None:
    write_report(completed_run(tmp_path))
    png = (tmp_path / PLOT_NAME).read_bytes()
    assert png.startswith(PNG_MAGIC)
    assert len(png) > 20_000
    import matplotlib.image

    pixels = matplotlib.image.imread(tmp_path / PLOT_NAME)
    assert pixels.shape[:2] == (480, 1200)
    assert pixels[..., :3].std() > 0.05  # lines were drawn, not a blank canvas


def test_results_json_round_trips(tmp_path: Path) -> None:
    data = completed_run(tmp_path)
    write_report(data)
    doc = json.loads((tmp_path / RESULTS_NAME).read_text())

    assert ReportData.model_validate(doc) == data
    assert doc["report_version"] == 1
    assert doc["elapsed_seconds"] == pytest.approx(3725)
    assert doc["evaluation_count"] == 6 and doc["attempt_count"] == 1 and doc["repair_count"] == 0
    assert doc["datasets"] == ["main_val_dataset", "aux_val"]
    change = doc["changes_since_baseline"]["main_val_dataset"]["mean_reward"]
    assert change["from_step"] == 0 and change["to_step"] == 30
    assert change["change"] == pytest.approx(0.30)
    assert doc["files"]["plot"] == PLOT_NAME
    assert doc["started_at_iso"] == "2024-12-24T00:26:45Z"


# ----------------------------------------------------------------------------- failed run


def test_failed_run_report_says_no_evaluation_and_skips_the_plot(tmp_path: Path) -> None:
    data = failed_run(tmp_path)
    (tmp_path / PLOT_NAME).write_bytes(b"stale plot of an earlier run")
    written = write_report(data)

    assert "plot" not in written and not (tmp_path / PLOT_NAME).exists()
    text = (tmp_path / REPORT_NAME).read_text()
    assert "**No evaluation was recorded.**" in _section(text, "Evaluations")
    assert "No plot: no evaluation with a step was recorded." in text
    assert "No final or best values were recorded." in text
    assert "**failed** — network unreachable" in text
    repairs = _section(text, "Repairs")
    assert "[repair_log.md](repair_log.md)" in repairs
    rows = _table_rows(repairs)
    assert [(r[2], r[3], r[6], r[7]) for r in rows] == [
        ("1", "`cuda_oom`", "relaunched", "attempt 2: network"),  # `next` left empty: taken from attempt 2
        ("2", "`network`", "not repairable", "gave up: proxychains4 is not installed"),
    ]
    assert "| Failures and repairs | 2 failures, 1 relaunched after a repair (see" in text
    assert "**warning** `ajet.trainer_common.test_freq`: 999999 means almost never" in text
    doc = json.loads((tmp_path / RESULTS_NAME).read_text())
    assert doc["outcome"] == "failed" and doc["evaluations"] == [] and doc["files"]["plot"] is None
    assert ReportData.model_validate(doc) == data
    _no_temp_files(tmp_path)


def test_repair_log_lists_preflight_then_every_failure_in_order(tmp_path: Path) -> None:
    data = failed_run(tmp_path)
    path = write_repair_log(tmp_path, data)
    text = path.read_text()

    preflight = text.index("## Before the first launch (preflight)")
    first = text.index("### 1. Attempt 1 failed")
    second = text.index("### 2. Attempt 2 failed")
    assert preflight < first < second
    assert "`python -m ajet.launcher --conf long.yaml --autokill` → `python -m ajet.launcher --conf long.yaml`" in text
    assert "--autokill kills every python process on the host" in text
    entry1 = text[first:second]
    assert "4m 59s after the first launch" in entry1
    assert "**Diagnosis:** `cuda_oom` — training ran out of GPU memory" in entry1
    assert "**Source of the fix:** catalogue" in entry1
    assert "```text\n  File \"x.py\", line 3\ntorch.OutOfMemoryError: CUDA out of memory.\n```" in entry1
    assert "- ajet.rollout.max_model_len: 16000 → 12000" in entry1
    assert "```diff\n--- a/long.yaml" in entry1 and "+    max_model_len: 12000\n```" in entry1
    assert "**What happened next:** attempt 2: network" in entry1  # filled from the next attempt
    entry2 = text[second:]
    assert "**What happened next:** gave up: proxychains4 is not installed" in entry2
    assert "No change was made." in entry2
    assert text.rstrip().endswith(
        "Outcome: failed on attempt 2 (2 failures, 1 relaunched after a repair) —"
        " network unreachable and proxychains is not installed."
    )


def test_repair_log_is_written_when_nothing_failed(tmp_path: Path) -> None:
    text = write_repair_log(tmp_path, completed_run(tmp_path)).read_text()
    assert "## Failures\n\nNo failures." in text
    assert "`ajet.execute_test`: `True` → `False` — a test probe ends training" in text
    assert text.rstrip().endswith("Outcome: completed on attempt 1 (no failures) — the command exited 0.")

    never = ReportData(id="x", result_dir=str(tmp_path), outcome="failed", reason="model path missing")
    text = write_repair_log(tmp_path, never).read_text()
    assert "The preflight changed nothing." in text
    assert text.rstrip().endswith("Outcome: failed before the first launch (no failures) — model path missing.")


# ----------------------------------------------------------------------------- timed-out run, odd data


def test_timed_out_run_with_nan_metrics(tmp_path: Path) -> None:
    data = timed_out_run(tmp_path)
    written = write_report(data)
    text = (tmp_path / REPORT_NAME).read_text()

    rows = _table_rows(_section(text, "Evaluations"))
    assert len(rows) == 3
    # step, dataset, mean_reward, Δ, std_reward, task_pass_rate@1, Δ
    assert rows[0][:7] == ["0", "–", "0.1000", "baseline", "n/a", "n/a", "baseline"]
    assert rows[1][2:4] == ["n/a", "n/a"]
    assert rows[2][2:7] == ["n/a", "n/a", "n/a", "0.3000", "n/a"]  # inf is not a value; no finite baseline
    best = {r[0]: r for r in _table_rows(_section(text, "Best and final values"))}
    assert best["`mean_reward`"][1:3] == ["n/a", "n/a"]
    assert best["`task_pass_rate@1`"][1:] == ["0.3000", "0.3000", "10"]
    assert "**timed_out** — time limit 1 h reached" in text
    assert "1h (100% used)" in text
    assert "`/elsewhere/a1.log`" in text  # a log outside the result dir is shown as a path

    raw = (tmp_path / RESULTS_NAME).read_text()
    doc = json.loads(raw, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))
    assert doc["evaluations"][1]["metrics"]["mean_reward"] is None
    assert doc["final"]["metrics"]["mean_reward"] is None
    assert doc["best"]["mean_reward"] is None
    assert "plot" in written and (tmp_path / PLOT_NAME).read_bytes().startswith(PNG_MAGIC)


def test_odd_data_never_raises(tmp_path: Path) -> None:
    data = ReportData(
        id="odd|id",
        result_dir=str(tmp_path / "new" / "dir"),
        evaluations=[
            "not a dict",
            {"metrics": {"mean_reward": "0.5"}},  # no step: no evaluation (an Evaluation has a step), dropped
            {"step": "3", "metrics": {"mean_reward": "41.25%", "num_pass_n_tasks(pass@4)": 7}},
            {"step": 4, "dataset": None, "mean_reward": float("nan")},  # flat shape
        ],
        final={"weird": [1, 2]},
        best={"mean_reward": 0.5, "x": "y"},
        history=[{"to": "running"}, "junk"],
        log_tail=["```", "plain ``` line", "\x07bell"],
        preflight_changes=[{"nothing": 1}, "junk"],  # type: ignore[list-item]
    )
    written = write_result_files(data)
    text = written["report"].read_text()
    assert "could not be rendered" not in text
    rows = _table_rows(_section(text, "Evaluations"))
    assert [r[0] for r in rows] == ["3", "4"]
    assert rows[0][2] == "41.2500" and "7" in rows[0]
    assert "````text\n```\nplain ``` line\nbell\n````" in text  # fence longer than any inside
    assert json.loads(written["results"].read_text())["id"] == "odd|id"
    assert read_finish_flag(tmp_path / "new" / "dir")["outcome"] == ""

    all_nan = ReportData(id="n", result_dir=str(tmp_path / "nan"),
                         evaluations=[{"step": 1, "metrics": {"mean_reward": math.nan}}])
    assert "plot" not in write_report(all_nan)
    report = (tmp_path / "nan" / REPORT_NAME).read_text()
    assert "No plot: no finite mean_reward or task_pass_rate value was recorded." in report


# ----------------------------------------------------------------------------- finish.flag, atomic writes


def test_finish_flag_read_clear_and_foreign_flags(tmp_path: Path) -> None:
    assert read_finish_flag(tmp_path) is None
    assert clear_finish_flag(tmp_path) is False
    path = write_finish_flag(tmp_path, "e1", Outcome.early_stopped, finished_at=0.0)
    assert path == tmp_path / FLAG_NAME
    flag = read_finish_flag(tmp_path)
    assert flag == {"id": "e1", "outcome": "early_stopped", "finished_at": "1970-01-01T00:00:00Z",
                    "finished_at_epoch": 0.0}
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert clear_finish_flag(tmp_path) is True and read_finish_flag(tmp_path) is None
    (tmp_path / FLAG_NAME).write_text("")  # touched by hand: still means "finished"
    assert read_finish_flag(tmp_path) == {"raw": ""}
    _no_temp_files(tmp_path)


def test_atomic_write_replaces_whole_file_and_cleans_up_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    atomic_write_text(target, "first")
    os.chmod(target, 0o600)
    atomic_write_text(target, "second ✓")
    assert target.read_text(encoding="utf-8") == "second ✓"
    assert target.stat().st_mode & 0o777 == 0o600  # an existing file keeps its mode
    (tmp_path / "adir").mkdir()
    with pytest.raises(OSError):
        atomic_write_text(tmp_path / "adir", "cannot replace a directory")
    _no_temp_files(tmp_path)


def test_baseline_is_step_zero_else_the_first_evaluation(tmp_path: Path) -> None:
    evaluations = [  # unsorted on purpose; "late" has no step 0
        {"step": 10, "dataset": "main", "metrics": {"mean_reward": 0.5}},
        {"step": 5, "dataset": "late", "metrics": {"mean_reward": 0.2}},
        {"step": 0, "dataset": "main", "metrics": {"mean_reward": 0.1}},
        {"step": 15, "dataset": "late", "metrics": {"mean_reward": 0.25}},
    ]
    data = ReportData(id="b", result_dir=str(tmp_path), evaluations=evaluations)
    write_report(data)
    doc = json.loads((tmp_path / RESULTS_NAME).read_text())
    main = doc["changes_since_baseline"]["main"]["mean_reward"]
    late = doc["changes_since_baseline"]["late"]["mean_reward"]
    assert (main["from_step"], main["to_step"]) == (0, 10) and main["change"] == pytest.approx(0.4)
    assert (late["from_step"], late["to_step"]) == (5, 15) and late["change"] == pytest.approx(0.05)
    rows = _table_rows(_section((tmp_path / REPORT_NAME).read_text(), "Evaluations"))
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("0", "main", "baseline"), ("5", "late", "baseline"), ("10", "main", "+0.4000"), ("15", "late", "+0.0500"),
    ]


def test_repair_log_shows_an_advised_and_a_refused_answer(tmp_path: Path) -> None:
    common = {"signature": "python_traceback", "explanation": "a traceback", "source": "adviser",
              "advised_by": "qwen-72b", "advice_seconds": 3.25, "advice_diagnosis": "TP must divide 28 heads"}
    data = ReportData(id="adv", result_dir=str(tmp_path), outcome="failed", reason="gave up", repairs=[
        RepairRecord(at=100.0, attempt=1, **common, advice_result="advised", result="relaunched",
                     rationale="4 divides 28", advice=["set YAML ajet.rollout.tensor_model_parallel_size = 4"],
                     changes=["set ajet.rollout.tensor_model_parallel_size: 3 -> 4"],
                     diff="--- a\n+++ b\n-    tensor_model_parallel_size: 3\n+    tensor_model_parallel_size: 4\n"),
        RepairRecord(at=200.0, attempt=2, **common, advice_result="refused", result="not repairable",
                     refused=["change 1 (env_set PATH): environment variable PATH may not be overridden"]),
    ])
    text = write_repair_log(tmp_path, data).read_text()
    first, second = text.split("### 2. Attempt 2 failed")
    assert "**Source of the fix:** adviser (the LLM repair adviser)" in first
    assert "Advised by `qwen-72b` in 3s — accepted." in first and "**Rationale:** 4 divides 28" in first
    assert "  - set YAML ajet.rollout.tensor_model_parallel_size = 4" in first
    assert "+    tensor_model_parallel_size: 4" in first
    assert "— refused by the runner." in second and "PATH may not be overridden" in second
    assert "No change was made." in second


def test_unscanned_log_ranges_are_named_in_the_report_and_results_json(tmp_path: Path) -> None:
    gap = {"start": 1024, "end": 9_000_000, "bytes": 8_998_976,
           "reason": "the attempt ended with its log not yet scanned"}
    data = ReportData(id="gap", result_dir=str(tmp_path), outcome="failed", reason="x", attempts=[
        AttemptInfo(number=1, started_at=1.0, ended_at=2.0, exit_code=1, log_path=str(tmp_path / "a.log"),
                    unscanned=[gap]),
        AttemptInfo(number=2, started_at=3.0, ended_at=4.0, exit_code=0, log_path=str(tmp_path / "b.log"))])
    write_report(data)
    report = (tmp_path / REPORT_NAME).read_text()
    assert "attempt 1: bytes 1024–9000000 of its log (8998976 bytes) were not scanned: the attempt ended" in report
    assert "attempt 2: bytes" not in report
    doc = json.loads((tmp_path / RESULTS_NAME).read_text())
    assert doc["attempts"][0]["unscanned"] == [gap] and "unscanned" not in doc["attempts"][1]


def test_the_report_shows_each_attempts_command_file_as_it_ran_multi_line_kept(tmp_path: Path) -> None:
    data = completed_run(tmp_path)
    multi = "cd /code && \\\n  python -m ajet.launcher \\\n    --conf math.yaml  # the main run\necho done"
    second = AttemptInfo(number=2, started_at=T0 + 10, ended_at=T0 + 20, exit_code=0,
                         command="proxychains4 -q " + multi, log_path="", end_reason="exited 0")
    data = data.model_copy(update={"attempts": [data.attempts[0].model_copy(update={"command": multi}), second]})
    write_result_files(data)
    attempts = _section((tmp_path / "experiment_report.md").read_text(), "Attempts")
    for number, command in ((1, multi), (2, "proxychains4 -q " + multi)):
        block = attempts.split(f"Command file as run (attempt {number}):\n\n```bash\n", 1)[1].split("\n```", 1)[0]
        assert block == command_script(command).rstrip("\n")  # byte for byte what logs/attempt-N.command.sh held
    assert "Command:" not in attempts  # no joined one-liner


def test_the_evaluation_table_names_the_attempt_whenever_a_relaunch_made_the_evaluations(tmp_path: Path) -> None:
    """Several attempts, or every evaluation from attempt 2 on (the first attempt evaluated nothing): an
    attempt column. Only attempt 1, or no attempt known (older events): none."""
    header = "| step | attempt | dataset |"
    for attempts, shown in (([1, 1, 2, 2, 2, 2], True), ([2] * 6, True), ([1] * 6, False), ([None] * 6, False)):
        data = completed_run(tmp_path)
        data.evaluations = [e.model_copy(update={"attempt": a}) for e, a in zip(data.evaluations, attempts,
                                                                                   strict=True)]
        write_report(data)
        report = (tmp_path / REPORT_NAME).read_text()
        assert (header in report) is shown, (attempts, report)
        if shown:
            rows = report[report.index(header):].split("\n\n", 1)[0].splitlines()[2:]
            assert [row.strip("| ").split(" | ")[1] for row in rows] == [str(a) for a in attempts], rows
