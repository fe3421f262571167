"""Result-file parsing: both validation formats, their quirks, the train file, discovery, the corpus."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ajet_runner.statemachine.logs.results import (
    MAX_LINE_CHARS,
    ResultSummary,
    classify_file,
    find_result_files,
    find_train_files,
    higher_is_better,
    latest_metrics,
    normalize_key,
    parse_train_file,
    parse_train_lines,
    parse_val_file,
    parse_val_files,
    parse_val_lines,
    parse_val_text,
)
from ajet_runner.statemachine.models import Evaluation
from tests.load import examples

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "results"

CLASSIC_0 = (
    "{'global_steps': 0, 'pass_n': 4, 'total_tasks': 1319, 'num_all_success_tasks': 701, "
    "'num_pass_n_tasks(pass@4)': 1042, 'task_pass_rate@1': 0.65, 'task_pass_rate@4': 0.79, "
    "'task_pass_rate@4-all-pass': 0.53, 'mean_reward': 0.65, 'std_reward': np.float64(0.47), "
    "'task_pass_rate@2': 0.73, 'target_dataset_name': 'main_val_dataset'}\n"
)


def classic(step: int, reward: float, dataset: str = "main_val_dataset", **extra: str) -> str:
    more = "".join(f", '{k}': {v}" for k, v in extra.items())
    return (
        f"{{'global_steps': {step}, 'pass_n': 4, 'mean_reward': {reward}, "
        f"'std_reward': np.float64(0.4){more}, 'target_dataset_name': '{dataset}'}}\n"
    )


def block(step: int, reward: float, label: str = "", dataset: str = "", rate: str = "41.25%") -> str:
    head = f"\n## Step {step}" + (f" ({label})" if label else "") + "\n"
    ds = f"- dataset: {dataset}\n" if dataset else ""
    body = f"- pass_n: 4\n- task_pass_rate@1: {rate}\n- mean_reward: {reward}\n- std_reward: 0.49\n"
    return head + ds + body


# ----------------------------------------------------------------------------- classic


def test_classic_line_numpy_reprs_and_key_normalisation() -> None:
    s = parse_val_text(CLASSIC_0)
    assert s.skipped == 0 and s.format == "classic"
    (ev,) = s.evaluations
    assert ev.step == 0 and ev.dataset == "main_val_dataset"
    assert ev.metrics["std_reward"] == 0.47
    assert ev.metrics["num_pass_n_tasks"] == 1042.0
    assert "num_pass_n_tasks(pass@4)" not in ev.metrics
    assert ev.metrics["task_pass_rate@4-all-pass"] == 0.53
    assert "global_steps" not in ev.metrics and "target_dataset_name" not in ev.metrics


def test_classic_nan_inf_and_numpy_variants() -> None:
    line = (
        "{'global_steps': np.int64(7), 'a': nan, 'b': inf, 'c': -inf, 'd': float('nan'), "
        "'e': float(\"-inf\"), 'f': np.float64(nan), 'g': np.float32(0.25), 'h': numpy.float64(1e-3), "
        "'flag': np.True_, 'name': 'nan inf np.float64(3)', 'none': None, 'lst': [1, 2]}\n"
    )
    (ev,) = parse_val_text(line).evaluations
    m = ev.metrics
    assert ev.step == 7
    assert math.isnan(m["a"]) and m["b"] == math.inf and m["c"] == -math.inf
    assert math.isnan(m["d"]) and m["e"] == -math.inf and math.isnan(m["f"])
    assert m["g"] == 0.25 and m["h"] == 0.001
    assert set(m) == {"a", "b", "c", "d", "e", "f", "g", "h"}  # bools, strings, None, lists dropped


def test_classic_newer_trainer_keys_first() -> None:
    line = (
        "{'val-core/gsm8k/reward/mean@4': np.float64(0.51), 'val-aux/gsm8k/reward/std@4': np.float64(0.3), "
        "'global_steps': 20, 'mean_reward': 0.51, 'target_dataset_name': 'main_val_dataset'}\n"
    )
    (ev,) = parse_val_text(line).evaluations
    assert ev.step == 20
    assert ev.metrics["val-core/gsm8k/reward/mean@4"] == 0.51
    assert ev.metrics["val-aux/gsm8k/reward/std@4"] == 0.3


def test_classic_unknown_reprs_fall_back_to_pairs() -> None:
    line = "{'global_steps': 30, 'mean_reward': 0.6, 'hist': array([1, 2, 3]), 'x': tensor(0.5), 'p': 0.2}\n"
    (ev,) = parse_val_text(line).evaluations
    assert ev.step == 30 and ev.metrics == {"mean_reward": 0.6, "p": 0.2}


def test_classic_step_from_other_keys_and_missing_step_is_skipped() -> None:
    text = "{'global_step': 3, 'mean_reward': 0.1}\n{'step': 4.0, 'mean_reward': 0.2}\n{'mean_reward': 0.3}\n"
    s = parse_val_text(text)
    assert [e.step for e in s.evaluations] == [3, 4]
    assert s.skipped == 1


def test_resumed_run_keeps_last_write_per_step() -> None:
    text = classic(0, 0.1) + classic(10, 0.2) + classic(20, 0.3) + classic(10, 0.25) + classic(20, 0.35)
    s = parse_val_text(text)
    assert [(e.step, e.metrics["mean_reward"]) for e in s.evaluations] == [(0, 0.1), (10, 0.25), (20, 0.35)]
    assert s.skipped == 0


def test_truncated_last_line_is_skipped_and_counted() -> None:
    text = classic(0, 0.1) + classic(10, 0.2) + classic(20, 0.3)[:40]
    s = parse_val_text(text)
    assert [e.step for e in s.evaluations] == [0, 10]
    assert s.skipped == 1


def test_line_cut_then_relaunch_appended_on_the_same_line() -> None:
    text = classic(0, 0.1) + classic(10, 0.2)[:30] + classic(10, 0.22)
    s = parse_val_text(text)
    assert [(e.step, e.metrics["mean_reward"]) for e in s.evaluations] == [(0, 0.1), (10, 0.22)]
    assert s.skipped == 1


def test_garbage_between_lines_is_ignored() -> None:
    text = (
        "# validation results\n\x00\x00\n"
        + classic(0, 0.1)
        + "Traceback (most recent call last):\nsome tqdm 45%|####   | 9/20\n{broken\n"
        + "\ufeff"
        + classic(10, 0.2)
        + "{1: 2}\n{'global_steps': 'x'}\n"
    )
    s = parse_val_text(text)
    assert [e.step for e in s.evaluations] == [0, 10]
    assert s.skipped == 3  # `{broken`, `{1: 2}` and the step that is not a number


def test_crlf_line_endings() -> None:
    s = parse_val_text((classic(0, 0.1) + block(5, 0.2)).replace("\n", "\r\n"))
    assert [e.step for e in s.evaluations] == [0, 5]
    assert s.evaluations[1].metrics["task_pass_rate@1"] == 0.4125


# ----------------------------------------------------------------------------- swarm


def test_swarm_block_percentages_become_fractions() -> None:
    s = parse_val_text(block(10, 0.4123, rate="41.25%"))
    (ev,) = s.evaluations
    assert s.format == "swarm" and ev.step == 10 and ev.dataset == ""
    assert ev.metrics == {
        "pass_n": 4.0, "task_pass_rate@1": 0.4125, "mean_reward": 0.4123, "std_reward": 0.49
    }


def test_swarm_pass_at_k_keys_are_reported_as_task_pass_rate() -> None:
    text = ("## Step 2\n- dataset: appworld_dev\n- pass@1: 40.00%\n- pass_at_4: 55%\n- pass_n: 4\n\n"
            "## Step 4\n- dataset: appworld_dev\n- pass@1: 50%\n- task_pass_rate@1: 0.7\n\n")
    s = parse_val_text(text)
    first, second = s.evaluations
    assert first.metrics["task_pass_rate@1"] == 0.4 and first.metrics["pass@1"] == 0.4
    assert first.metrics["task_pass_rate@4"] == 0.55 and first.metrics["pass_at_4"] == 0.55
    assert "task_pass_rate@n" not in first.metrics and first.metrics["pass_n"] == 4.0
    assert second.metrics["task_pass_rate@1"] == 0.7  # a key the block writes itself is never replaced
    assert s.best["task_pass_rate@1"] == {"value": 0.7, "step": 4}
    assert latest_metrics(s)["task_pass_rate@1"] == 0.7


def test_swarm_blocks_named_by_label_or_dataset_line() -> None:
    text = block(0, 0.1, label="AIME-2025") + block(0, 0.4, dataset="dapo")
    text += block(10, 0.2, label="AIME-2025")
    s = parse_val_text(text)
    assert [(e.step, e.dataset) for e in s.evaluations] == [(0, "AIME-2025"), (0, "dapo"), (10, "AIME-2025")]
    assert s.primary_dataset == "AIME-2025" and s.datasets == ["AIME-2025", "dapo"]
    # a `- dataset:` line wins over the heading label
    (ev,) = parse_val_text(block(3, 0.1, label="lbl", dataset="real")).evaluations
    assert ev.dataset == "real"


def test_swarm_unnamed_sets_sharing_a_step_are_kept_apart() -> None:
    text = block(0, 0.1) + block(0, 0.4) + block(10, 0.2) + block(10, 0.5)
    s = parse_val_text(text)
    assert [(e.step, e.dataset, e.metrics["mean_reward"]) for e in s.evaluations] == [
        (0, "set1", 0.1),
        (0, "set2", 0.4),
        (10, "set1", 0.2),
        (10, "set2", 0.5),
    ]


def test_swarm_unnamed_relaunch_repeating_the_same_step_right_away() -> None:
    # two sets per validation; the relaunch re-validates step 10 directly after the first one
    text = block(0, 0.1) + block(0, 0.4) + block(10, 0.2) + block(10, 0.5) + block(10, 0.21) + block(10, 0.51)
    s = parse_val_text(text)
    assert [(e.step, e.dataset, e.metrics["mean_reward"]) for e in s.evaluations] == [
        (0, "set1", 0.1),
        (0, "set2", 0.4),
        (10, "set1", 0.21),
        (10, "set2", 0.51),
    ]


def test_swarm_resumed_named_blocks_keep_last() -> None:
    text = block(0, 0.1, label="a") + block(10, 0.2, label="a") + block(10, 0.3, label="a")
    s = parse_val_text(text)
    assert [(e.step, e.metrics["mean_reward"]) for e in s.evaluations] == [(0, 0.1), (10, 0.3)]


@pytest.mark.parametrize("cut", ["- mean_reward: 0.4", "- mean_re", "- task_pass_rate@1: 41.2"])
def test_swarm_truncated_last_block_is_skipped(cut: str) -> None:
    whole = block(20, 0.4123)
    text = block(0, 0.1) + block(10, 0.2) + whole[: whole.index(cut.split(":")[0][:9]) + len(cut)]
    s = parse_val_text(text)
    assert [e.step for e in s.evaluations] == [0, 10]
    assert s.skipped == 1


def test_swarm_block_cut_at_a_line_end_is_detected_as_a_prefix() -> None:
    text = block(0, 0.1) + block(10, 0.2) + "\n## Step 20\n- pass_n: 4\n- task_pass_rate@1: 45.00%\n"
    s = parse_val_text(text)
    assert [e.step for e in s.evaluations] == [0, 10]
    assert s.skipped == 1


def test_swarm_heading_alone_at_the_end_is_skipped() -> None:
    s = parse_val_text(block(0, 0.1) + "\n## Step 10\n")
    assert [e.step for e in s.evaluations] == [0] and s.skipped == 1


def test_swarm_format_change_between_relaunches_is_not_mistaken_for_truncation() -> None:
    old = block(0, 0.1) + block(10, 0.2)
    new = block(20, 0.3).replace("- std_reward: 0.49\n", "- std_reward: 0.49\n- n_rollouts: 320\n")
    s = parse_val_text(old + new + new.replace("Step 20", "Step 30"))
    assert [e.step for e in s.evaluations] == [0, 10, 20, 30] and s.skipped == 0


def test_swarm_values_tolerated() -> None:
    text = (
        "## Step 4: gsm8k\n- **mean_reward**: `0.5`\n- task_pass_rate@4: 50 %\n- note: looks fine\n"
        "- std_reward: np.float64(0.1)\n- bad: nan\n- step: 4\n"
    )
    (ev,) = parse_val_text(text).evaluations
    assert ev.dataset == "gsm8k"
    assert ev.metrics["mean_reward"] == 0.5 and ev.metrics["task_pass_rate@4"] == 0.5
    assert ev.metrics["std_reward"] == 0.1 and math.isnan(ev.metrics["bad"])
    assert "note" not in ev.metrics and "step" not in ev.metrics


def test_mixed_formats_in_one_file() -> None:
    s = parse_val_text(classic(0, 0.1) + block(10, 0.2, label="main_val_dataset") + classic(20, 0.3))
    assert s.format == "mixed"
    assert [(e.step, e.dataset) for e in s.evaluations] == [(i, "main_val_dataset") for i in (0, 10, 20)]


# ----------------------------------------------------------------------------- summary


def test_final_best_baseline_latest() -> None:
    text = classic(0, 0.2) + classic(10, 0.5) + classic(20, 0.4) + classic(5, 0.9, dataset="other")
    s = parse_val_text(text)
    assert s.primary_dataset == "main_val_dataset"
    final_metrics = {"pass_n": 4.0, "mean_reward": 0.4, "std_reward": 0.4}
    assert s.final == {"step": 20, "dataset": "main_val_dataset", "metrics": final_metrics}
    assert s.baseline["step"] == 0 and s.baseline["metrics"]["mean_reward"] == 0.2
    assert s.best["mean_reward"] == {"value": 0.5, "step": 10}  # the other dataset's 0.9 is not compared
    assert "std_reward" not in s.best and "pass_n" not in s.best
    assert latest_metrics(s) == {"pass_n": 4.0, "mean_reward": 0.4, "std_reward": 0.4, "step": 20.0}


def test_best_ignores_nan_and_keeps_earliest_tie() -> None:
    s = parse_val_text(classic(0, "nan") + classic(10, 0.5) + classic(20, 0.5) + classic(30, "inf"))
    assert s.best["mean_reward"] == {"value": 0.5, "step": 10}


def test_baseline_without_step_zero_is_the_first_evaluation() -> None:
    s = parse_val_text(classic(10, 0.5) + classic(20, 0.6))
    assert s.baseline["step"] == 10


def test_empty_input() -> None:
    s = parse_val_text("")
    assert s == ResultSummary()
    assert latest_metrics(s) == {}


def test_higher_is_better_and_normalize_key() -> None:
    good = ["mean_reward", "task_pass_rate@1", "task_pass_rate@4-all-pass", "num_all_success_tasks",
            "num_pass_n_tasks", "val-core/gsm8k/reward/mean@4", "val-core/x/acc/best@4/mean"]
    bad = ["std_reward", "total_tasks", "pass_n", "val-aux/gsm8k/reward/std@4", "n_rollouts"]
    assert all(higher_is_better(m) for m in good)
    assert not any(higher_is_better(m) for m in bad)
    assert normalize_key("num_pass_n_tasks(pass@8)") == "num_pass_n_tasks"
    assert normalize_key("**mean_reward**") == "mean_reward"


def test_parse_val_lines_accepts_lines_without_endings() -> None:
    s = parse_val_lines([classic(0, 0.1).rstrip("\n"), "## Step 5", "- mean_reward: 0.3"])
    assert [(e.step, e.metrics["mean_reward"]) for e in s.evaluations] == [(0, 0.1), (5, 0.3)]


def test_evaluations_are_models_that_serialise() -> None:
    s = parse_val_text(classic(0, "nan") + classic(1, 0.3))
    assert all(isinstance(e, Evaluation) for e in s.evaluations)
    dumped = s.model_dump_json()
    assert '"mean_reward":null' in dumped.replace(" ", "")


# ----------------------------------------------------------------------------- files


def test_parse_val_file_streams_and_matches_text(tmp_path: Path) -> None:
    text = classic(0, 0.1) + block(10, 0.2) + classic(20, 0.3)[:25]
    path = tmp_path / "val.md"
    path.write_text(text)
    from_file = parse_val_file(path)
    from_text = parse_val_text(text)
    assert from_file.evaluations == from_text.evaluations and from_file.skipped == from_text.skipped == 1
    assert from_file.files == [str(path)]


def test_parse_val_file_missing_and_binary(tmp_path: Path) -> None:
    assert parse_val_file(tmp_path / "nope.md").evaluations == []
    junk = tmp_path / "junk.md"
    junk.write_bytes(
        b"\xff\xfe\x00{'global_steps': 1}\n\x89PNG\r\n\x1a\n" + bytes(range(256)) + b"\n"
        + classic(9, 0.5).encode()
    )
    s = parse_val_file(junk)
    assert [e.step for e in s.evaluations] == [9]


def test_overlong_line_is_skipped_without_holding_it(tmp_path: Path) -> None:
    path = tmp_path / "val.md"
    with path.open("w") as f:
        f.write(classic(0, 0.1))
        f.write("{'global_steps': 5, 'x': '" + "a" * (MAX_LINE_CHARS + 10) + "'}\n")
        f.write(classic(10, 0.2))
    s = parse_val_file(path)
    assert [e.step for e in s.evaluations] == [0, 10] and s.skipped == 1


def test_parse_val_files_qualifies_datasets_by_file(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text(classic(0, 0.1) + classic(10, 0.2))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.md").write_text(block(0, 0.5))
    s = parse_val_files([tmp_path / "a.md", tmp_path / "sub" / "b.md"], root=tmp_path)
    assert [(e.step, e.dataset) for e in s.evaluations] == [(0, "a.md:main_val_dataset"), (0, "sub/b.md"),
                                                            (10, "a.md:main_val_dataset")]
    assert s.primary_dataset == "a.md:main_val_dataset" and s.format == "mixed"


# ----------------------------------------------------------------------------- train file


def test_train_lines_dedupe_truncation_and_step_key() -> None:
    lines = [
        "{'actor/entropy': np.float64(0.6), 'critic/real_reward': np.float64(0.4),"
        " 'training/global_step': 1}\n",
        "{'critic/real_reward': 0.5, 'global_steps': 2, 'mean_reward': 0.3, 'training/global_step': 2,"
        " 'target_dataset_name': 'main_val_dataset'}\n",
        "not a record\n",
        "{'critic/real_reward': 0.45, 'training/global_step': 1}\n",
        "{'critic/real_reward': 0.6, 'training/glo",
    ]
    t = parse_train_lines(lines)
    assert [(s.step, s.metrics["critic/real_reward"]) for s in t.steps] == [(1, 0.45), (2, 0.5)]
    assert t.steps[1].metrics["mean_reward"] == 0.3
    assert "training/global_step" not in t.steps[0].metrics and "global_steps" not in t.steps[1].metrics
    assert t.skipped == 1
    assert t.series("critic/real_reward") == [(1, 0.45), (2, 0.5)]


def test_parse_train_file_missing(tmp_path: Path) -> None:
    assert parse_train_file(tmp_path / "none.md").steps == []


# ----------------------------------------------------------------------------- discovery


def test_find_result_files_in_a_result_dir(tmp_path: Path) -> None:
    (tmp_path / "saved_val_result").mkdir()
    shutil.copy(CORPUS / "classic_math.md", tmp_path / "saved_val_result" / "qwen2-7b-math-exp-01.md")
    shutil.copy(CORPUS / "swarm_two_sets.md", tmp_path / "val_results.md")
    shutil.copy(CORPUS / "train_results.md", tmp_path / "train_results.md")
    (tmp_path / "experiment_report.md").write_text("## Step 0\n- mean_reward: 0.5\n" + CLASSIC_0)
    (tmp_path / "repair_log.md").write_text(CLASSIC_0)
    (tmp_path / "attempt-1.log").write_text(CLASSIC_0)
    (tmp_path / "notes.md").write_text("# plan\n## Step 1\n- download the data: done\n## Step 2\n- train\n")
    (tmp_path / "finish.flag").write_text("")
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "val.md").write_text(CLASSIC_0)

    found = find_result_files(tmp_path)
    assert found == [tmp_path / "saved_val_result" / "qwen2-7b-math-exp-01.md", tmp_path / "val_results.md"]
    assert find_train_files(tmp_path) == [tmp_path / "train_results.md"]
    assert find_result_files(tmp_path / "notes.md") == [tmp_path / "notes.md"]  # a file is taken as given
    assert find_result_files(tmp_path / "missing") == []
    assert classify_file(tmp_path / "notes.md") == ""


# ----------------------------------------------------------------------------- corpus


def test_corpus_classic_math() -> None:
    s = parse_val_file(CORPUS / "classic_math.md")
    assert s.format == "classic" and s.skipped == 0 and s.datasets == ["main_val_dataset"]
    assert [e.step for e in s.evaluations] == [0, 10, 20, 30, 40, 50]
    assert all(len(e.metrics) == 10 for e in s.evaluations)
    assert s.evaluations[0].metrics["std_reward"] == 0.4758213350349584
    assert s.final["step"] == 50 and s.final["metrics"]["mean_reward"] == 0.8066717210007582
    assert s.final["metrics"]["num_pass_n_tasks"] == 1187.0
    assert s.baseline["step"] == 0 and s.baseline["metrics"]["task_pass_rate@4"] == 0.7899924184988628
    assert s.best["mean_reward"] == {"value": 0.8108415466262319, "step": 40}
    assert s.best["task_pass_rate@4"] == {"value": 0.9021986353297953, "step": 40}
    assert s.best["num_all_success_tasks"] == {"value": 981.0, "step": 40}


def test_corpus_newer_trainer() -> None:
    s = parse_val_file(CORPUS / "newer_trainer.md")
    assert [e.step for e in s.evaluations] == [0, 20, 40] and s.skipped == 0
    assert s.evaluations[0].metrics["val-core/gsm8k/reward/mean@4"] == 0.5125
    assert math.isnan(s.evaluations[1].metrics["std_reward"])
    assert s.evaluations[2].metrics["eval_reward_max"] == math.inf
    assert s.best["val-core/gsm8k/reward/best@4/mean"] == {"value": 0.75, "step": 20}
    assert s.best["task_pass_rate@4"] == {"value": 0.75, "step": 20}
    assert s.final["metrics"]["mean_reward"] == 0.61875


def test_corpus_swarm_two_sets() -> None:
    s = parse_val_file(CORPUS / "swarm_two_sets.md")
    assert s.format == "swarm" and s.skipped == 0
    assert s.datasets == ["AIME-2025", "DAPO-Math-Tiny-Val"] and s.primary_dataset == "AIME-2025"
    got = [(e.step, e.dataset, e.metrics["task_pass_rate@1"], e.metrics["task_pass_rate@4"])
           for e in s.evaluations]
    assert got == [
        (0, "AIME-2025", 0.1583, 0.3),
        (0, "DAPO-Math-Tiny-Val", 0.4125, 0.5625),
        (10, "AIME-2025", 0.2, 0.3667),
        (10, "DAPO-Math-Tiny-Val", 0.475, 0.625),
        (20, "AIME-2025", 0.1917, 0.3333),
        (20, "DAPO-Math-Tiny-Val", 0.5031, 0.6625),
    ]
    assert s.final == {"step": 20, "dataset": "AIME-2025", "metrics": s.evaluations[4].metrics}
    assert s.best["mean_reward"] == {"value": 0.2, "step": 10}
    assert s.evaluations[1].metrics["n_rollouts"] == 320.0


def test_corpus_swarm_relaunched_unnamed_sets() -> None:
    s = parse_val_file(CORPUS / "swarm_relaunched.md")
    assert s.skipped == 1  # the block cut at step 20
    got = [(e.step, e.dataset, e.metrics["mean_reward"], e.metrics["total_tasks"]) for e in s.evaluations]
    assert got == [
        (0, "set1", 0.15, 30.0),  # the relaunch's step-0 validation replaced the first one
        (0, "set2", 0.4094, 80.0),
        (10, "set1", 0.1833, 30.0),
        (10, "set2", 0.4594, 80.0),
        (20, "set1", 0.2083, 30.0),
        (20, "set2", 0.4969, 80.0),
    ]


def test_corpus_swarm_truncated() -> None:
    s = parse_val_file(CORPUS / "swarm_truncated.md")
    assert [(e.step, e.dataset) for e in s.evaluations] == [(0, "gsm8k-test"), (5, "gsm8k-test")]
    assert s.skipped == 1 and s.final["metrics"]["task_pass_rate@4"] == 0.5875


def test_corpus_resumed() -> None:
    s = parse_val_file(CORPUS / "resumed.md")
    assert [(e.step, e.metrics["mean_reward"]) for e in s.evaluations] == [
        (0, 0.42), (10, 0.47), (20, 0.505), (30, 0.55), (40, 0.545)
    ]
    assert s.evaluations[2].metrics["num_pass_n_tasks"] == 352.0 and s.skipped == 0
    assert s.best["mean_reward"] == {"value": 0.55, "step": 30}
    assert s.best["num_pass_n_tasks"] == {"value": 372.0, "step": 40}
    assert latest_metrics(s)["step"] == 40.0


def test_corpus_truncated() -> None:
    s = parse_val_file(CORPUS / "truncated.md")
    assert [e.step for e in s.evaluations] == [0, 10, 20] and s.skipped == 1
    assert s.final["metrics"]["mean_reward"] == 0.5


def test_corpus_train_file() -> None:
    t = parse_train_file(CORPUS / "train_results.md")
    assert [s.step for s in t.steps] == [1, 2, 3, 4, 5] and t.skipped == 1
    assert t.steps[2].metrics["critic/score/mean"] == 0.47  # the relaunch's write of step 3
    assert t.steps[0].metrics["actor/lr"] == 1e-06 and t.steps[0].metrics["timing_s/step"] == 141.5
    assert t.steps[4].metrics["mean_reward"] == 0.55 and len(t.steps[4].metrics) == 16
    assert classify_file(CORPUS / "train_results.md") == "train"


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.md") if p.name != "train_results.md"))
def test_corpus_val_files_are_found_and_text_equals_file(name: str) -> None:
    path = CORPUS / name
    assert classify_file(path) == "val"
    assert parse_val_text(path.read_text()).evaluations == parse_val_file(path).evaluations


# ----------------------------------------------------------------------------- never raise

_fragments = st.sampled_from(
    [
        CLASSIC_0,
        CLASSIC_0[:50],
        "## Step 3\n",
        "## Step 3 (x)\n",
        "## Step -1\n",
        "- mean_reward: 41%\n",
        "- dataset: a\n",
        "- task_pass_rate@1: nan%\n",
        "- broken\n",
        "{'global_steps': 1e400, 'a': np.float64(",
        "{'global_steps': 2, 'a': " + "[" * 120 + "]" * 120 + "}\n",
        "{" * 300 + "}" * 300 + "\n",
        "{'global_steps': True}\n",
        "\n",
        "\r",
        "\x00",
        "'",
        '"',
    ]
)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_fragments, st.text(max_size=40)), max_size=25))
def test_parsers_never_raise_on_mixed_fragments(parts: list[str]) -> None:
    text = "".join(parts)
    s = parse_val_text(text)
    assert s.skipped >= 0
    assert [(e.step, e.dataset) for e in s.evaluations] == sorted((e.step, e.dataset) for e in s.evaluations)
    assert len({(e.step, e.dataset) for e in s.evaluations}) == len(s.evaluations)
    s.model_dump_json()
    parse_val_lines(parts)
    parse_train_lines(text.splitlines(keepends=True))
    latest_metrics(s)


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_parsers_never_raise_on_arbitrary_text(text: str) -> None:
    parse_val_text(text)
    parse_val_lines(text.splitlines())
    parse_train_lines(text.splitlines(keepends=True))


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=2000))
def test_file_parsers_never_raise_on_arbitrary_bytes(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "val.md"
    path.write_bytes(data)
    parse_val_file(path)
    parse_train_file(path)
    classify_file(path)
