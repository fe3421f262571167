"""verl's `step:N - key:value` console rows: validation rows and training rows told apart by their keys.

The lines below are shaped as verl's `concat_dict_to_str` prints them (`key:pprint.pformat(value)`,
numbers only, ` - `-joined); tests/conformance/test_runner_formats.py checks that shape against the
real function and the real AgentJet trainer's output.
"""

from __future__ import annotations

import math

import pytest

from ajet_runner.statemachine.logs.metrics import (
    LogMetrics,
    parse_log_text,
    scan_log_lines,
    step_ranges,
    steps_of_ranges,
)
from ajet_runner.statemachine.logs.steplines import is_training_key, is_validation_marker, parse_step_line

# AgentJet 0.0.1's eval_dataset row (numpy 1 reprs) and the same validation merged into a training row (numpy 2).
VAL_ROW = ("step:3 - pass_n:4 - total_tasks:20 - num_all_success_tasks:2 - num_pass_n_tasks(pass@4):9 - "
           "TGC@1:0.2625 - TGC@4:0.45 - TGC@4-all-pass:0.1 - mean_reward:0.2625")
TRAIN_VAL_ROW = ("step:3 - critic/score/mean:np.float64(0.25) - actor/pg_loss:np.float64(-0.0075) - actor/lr:1e-06 - "
                 "pass_n:4 - total_tasks:20 - num_all_success_tasks:2 - num_pass_n_tasks(pass@4):9 - "
                 "TGC@1:0.2625 - TGC@4:0.45 - TGC@4-all-pass:0.1 - mean_reward:0.2625 - training/global_step:3 - "
                 "training/epoch:0 - timing_s/step:np.float64(0.51) - perf/throughput:np.float64(812.5)")
TRAIN_ROW = ("step:4 - critic/score/mean:np.float64(0.3) - actor/entropy:np.float64(0.8) - training/global_step:4 - "
             "timing_s/gen:0.25 - response_length/mean:np.float64(421.0)")


def test_a_validation_row_is_one_evaluation_of_its_validation_keys() -> None:
    row = parse_step_line(VAL_ROW)
    assert row is not None and row.step == 3 and row.is_validation and not row.is_training
    assert row.validation == {"pass_n": 4.0, "total_tasks": 20.0, "num_all_success_tasks": 2.0,
                              "num_pass_n_tasks": 9.0, "TGC@1": 0.2625, "TGC@4": 0.45, "TGC@4-all-pass": 0.1,
                              "mean_reward": 0.2625}


def test_a_training_step_that_validated_is_both_and_its_evaluation_equals_the_pure_row() -> None:
    merged = parse_step_line(TRAIN_VAL_ROW)
    pure = parse_step_line(VAL_ROW)
    assert merged is not None and pure is not None
    assert merged.is_validation and merged.is_training
    assert merged.validation == pure.validation
    assert merged.training["actor/pg_loss"] == -0.0075 and merged.training["timing_s/step"] == 0.51
    assert "training/global_step" in merged.training and "actor/lr" in merged.training


def test_a_training_row_is_no_evaluation() -> None:
    row = parse_step_line(TRAIN_ROW)
    assert row is not None and row.is_training and not row.is_validation and row.validation == {}


@pytest.mark.parametrize("key,training,marker", [
    ("critic/score/mean", True, False), ("actor/kl_loss", True, False), ("timing_s/step", True, False),
    ("training/global_step", True, False), ("perf/throughput", True, False),
    ("val-core/gsm8k/TGC@1", False, True), ("val-aux/num_turns/min", False, True), ("val/score", False, True),
    ("TGC@1", False, True), ("TGC@4-all-pass", False, True), ("mean_reward", False, True),
    ("num_pass_n_tasks", False, True), ("pass@4", False, True), ("task_pass_rate@2", False, True),
    ("pass_n", False, False), ("total_tasks", False, False), ("lr", False, False),
])
def test_the_key_rule(key: str, training: bool, marker: bool) -> None:
    assert is_training_key(key) is training
    assert is_validation_marker(key) is marker


def test_values_are_whatever_pformat_prints_for_a_number() -> None:
    row = parse_step_line("step:0 - a/x:nan - a/y:-inf - a/z:np.float32(1.5) - a/b:True - a/n:np.int64(7) - "
                          "mean_reward:np.float64(nan) - val-core/s/TGC@1:1e-06")
    assert row is not None
    assert math.isnan(row.training["a/x"]) and row.training["a/y"] == -math.inf
    assert row.training["a/z"] == 1.5 and row.training["a/n"] == 7.0 and "a/b" not in row.training  # a bool
    assert math.isnan(row.validation["mean_reward"]) and row.validation["val-core/s/TGC@1"] == 1e-06


def test_a_key_holding_the_separator_does_not_shift_the_others() -> None:
    row = parse_step_line("step:5 - val-core/a - b/TGC@1:0.5 - mean_reward:0.25")
    assert row is not None and row.validation == {"val-core/a - b/TGC@1": 0.5, "mean_reward": 0.25}


@pytest.mark.parametrize("line", ["step:3", "step:x - a:1", "stepping:3 - a:1", "step:3 - a:b", "the step:3 - a:1",
                                  "step:3 - :1"])
def test_what_is_not_a_step_row(line: str) -> None:
    assert parse_step_line(line) is None


def test_forty_steps_with_test_freq_1_keep_41_evaluations_and_40_training_steps() -> None:
    """The issue's run: verl printed every validation; only two dicts were kept before."""
    lines = ["Total training steps: 40", VAL_ROW.replace("step:3", "step:0"),
             "'Initial validation metrics: ' \"{'target dataset name': 'main_val_dataset', 'pass_n': 4, ...}\""]
    for step in range(1, 41):
        lines.append(VAL_ROW.replace("step:3 ", f"step:{step} ").replace("0.2625", f"0.{step + 10}"))
        lines.append(TRAIN_VAL_ROW.replace("step:3 ", f"step:{step} ").replace("0.2625", f"0.{step + 10}")
                     .replace("training/global_step:3", f"training/global_step:{step}"))
        lines.append(f"Training Progress: {step * 100 // 40}%|##| {step}/40 [00:0{step % 10}<00:00, 1.0it/s]")
    lines.append("('Final validation metrics: {\\'target dataset name\\': \\'main_val_dataset\\', \\'pass_n\\': 4, '\n"
                 " '\\'total_tasks\\': 20, \\'num_all_success_tasks\\': 2, \\'num_pass_n_tasks(pass@4)\\': 9, '\n"
                 " '\\'TGC@1\\': 0.50, \\'TGC@4\\': 0.45, \\'TGC@4-all-pass\\': 0.1, \\'mean_reward\\': 0.50}')")
    parser = scan_log_lines(lines)
    s = parser.summary()
    assert [e.step for e in s.evaluations] == list(range(41))
    assert parser.train_step_count == 40 and parser.skipped == 1  # the cut Initial dict above
    assert s.evaluations[40].metrics["task_pass_rate@1"] == 0.50 and s.final["step"] == 40
    assert s.evaluations[7].metrics["mean_reward"] == 0.17


def test_a_dict_equal_to_the_row_just_printed_is_that_step_even_without_a_progress_bar() -> None:
    final = ("Final validation metrics: {'target dataset name': 'x', 'pass_n': 4, 'total_tasks': 20, "
             "'num_all_success_tasks': 2, 'num_pass_n_tasks(pass@4)': 9, 'TGC@1': 0.2625, 'TGC@4': 0.45, "
             "'TGC@4-all-pass': 0.1, 'mean_reward': 0.2625}")
    s = parse_log_text(f"{VAL_ROW}\n{TRAIN_VAL_ROW}\n{final}\n")
    assert [e.step for e in s.evaluations] == [3]
    other = final.replace("'mean_reward': 0.2625", "'mean_reward': 0.3")
    s = parse_log_text(f"{VAL_ROW}\n{other}\n")
    assert [e.step for e in s.evaluations] == [3, 4]  # not equal: the old rule (no bar: the next step)


def test_final_none_is_no_record_and_no_skip() -> None:
    m = LogMetrics()
    m.feed_lines([VAL_ROW, "'Final validation metrics: None'", "Final validation metrics: None"])
    assert m.skipped == 0 and list(m.by_step) == [3]


def test_training_steps_survive_a_checkpoint_as_ranges() -> None:
    m = LogMetrics()
    m.feed_lines([TRAIN_ROW.replace("step:4 ", f"step:{s} ") for s in (*range(1, 1001), 1500, 1502)])
    state = m.checkpoint()
    assert state["train_steps"] == [[1, 1000], [1500, 1500], [1502, 1502]]
    again = LogMetrics.resume(state)
    assert again.train_steps == m.train_steps and again.train_step_count == 1002
    older = dict(state)
    del older["train_steps"]  # a checkpoint written before training steps were kept
    assert LogMetrics.resume(older).train_steps == set()
    assert steps_of_ranges([[3, 1], ["a", 2], [5], None, [0, 10**9]]) == set()
    assert step_ranges([3, 1, 2, 2, 7]) == [[1, 3], [7, 7]]


def test_a_real_agentjet_0_0_1_log_keeps_every_evaluation_and_training_step() -> None:
    """tests/corpus/console/agentjet-0.0.1-test_freq1.log: the real launcher and the real trainer's printing
    (AgentJet 0.0.1's eval_dataset, verl's Tracking console logger) under the conformance stand-ins, 6 steps,
    test_freq 1. Before the key rule only its two dicts were read: steps 0 and 6."""
    from tests.conftest import CORPUS

    with open(CORPUS / "console" / "agentjet-0.0.1-test_freq1.log", encoding="utf-8") as fh:
        parser = scan_log_lines(fh)
    s = parser.summary()
    assert [e.step for e in s.evaluations] == [0, 1, 2, 3, 4, 5, 6]
    assert parser.train_step_count == 6 and parser.skipped == 0
    assert s.evaluations[3].metrics["task_pass_rate@1"] == s.evaluations[3].metrics["TGC@1"] == 0.515625
    assert s.final["step"] == 6 and s.final["metrics"]["mean_reward"] == 0.71875
    assert s.best["task_pass_rate@1"] == {"value": 0.7265625, "step": 5}


def test_the_followers_fast_reading_agrees_with_the_full_one() -> None:
    """LogMetrics reads step lines without the training values (training_values=False): the kind of each
    row and every evaluation must be the same as the full parse gives, on every step line of a real log."""
    from ajet_runner.statemachine.logs.text import clean_lines
    from tests.conftest import CORPUS

    text = (CORPUS / "console" / "agentjet-0.0.1-test_freq1.log").read_text(encoding="utf-8")
    lines = [ln for ln in clean_lines(text.splitlines()) if ln.startswith("step:")]
    lines += [VAL_ROW, TRAIN_VAL_ROW, TRAIN_ROW, "step:2 - lr:0.1 - a/b:x", "step:2 - a/b:True - c/d:1"]
    assert len(lines) > 14
    def kind(row: object) -> tuple[bool, bool]:
        return (row.is_training, row.is_validation) if row is not None else (False, False)  # type: ignore[attr-defined]

    for line in lines:
        full, fast = parse_step_line(line), parse_step_line(line, training_values=False)
        assert kind(full) == kind(fast), line
        if full is not None and full.is_validation:
            assert fast is not None and fast.validation == full.validation, line
        assert fast is None or fast.training == {}
