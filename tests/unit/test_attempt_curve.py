"""Evaluations merged across attempts by step (workers/report/attempt_curve.py), and the start facts
read from a log (statemachine/logs/checkpoints.py): a resumed attempt continues the curve, a restarted one
replaces it."""

from __future__ import annotations

from pathlib import Path

from ajet_runner.statemachine.logs.checkpoints import agentjet_name, checkpoint_dir, explicit_name, parse_start
from ajet_runner.store.records import Attempt, Context
from ajet_runner.workers.report.attempt_curve import attempt_curve


def val_line(step: int, reward: float) -> str:
    return f"{{'global_steps': {step}, 'mean_reward': {reward}, 'task_pass_rate@1': {reward}}}\n"


def write_attempts(tmp_path: Path, parts: list[list[tuple[int, float]]], starts: list[int | None]) -> Context:
    val = tmp_path / "val.md"
    val.write_text("", encoding="utf-8")
    attempts = []
    for number, (part, start) in enumerate(zip(parts, starts, strict=True), 1):
        offset = val.stat().st_size
        with val.open("a", encoding="utf-8") as fh:
            fh.writelines(val_line(s, r) for s, r in part)
        log = tmp_path / f"attempt-{number}.log"
        log.write_text("", encoding="utf-8")
        attempts.append(Attempt(number=number, started_at=float(number), log_path=str(log), val_offset=offset,
                                start_step=start, console_evaluations=[]))
    return Context(val_path=str(val), val_start={"inode": val.stat().st_ino, "offset": 0}, attempts=attempts)


def curve_of(ctx: Context) -> list[tuple[int, int, float]]:
    curve = attempt_curve(ctx, file_usable=True)
    assert curve is not None
    return [(e.step, curve.attempt_of[(e.step, e.dataset)], e.metrics["mean_reward"])
            for e in curve.summary.evaluations]


def test_a_resumed_attempt_continues_the_curve_from_its_checkpoint(tmp_path: Path) -> None:
    # attempt 1 evaluated 0, 2, 4, 6 and died at step 7 with its last checkpoint at 4; attempt 2 resumed at 4
    ctx = write_attempts(tmp_path, [[(0, 0.1), (2, 0.2), (4, 0.3), (6, 0.4)], [(4, 0.31), (6, 0.41), (8, 0.5)]],
                         [0, 4])
    assert curve_of(ctx) == [(0, 1, 0.1), (2, 1, 0.2), (4, 2, 0.31), (6, 2, 0.41), (8, 2, 0.5)]
    curve = attempt_curve(ctx, file_usable=True)
    assert curve is not None
    assert {(g["attempt"], g["step"]) for g in curve.superseded} == {(1, 4), (1, 6)}
    assert [s["how"] for s in curve.lineage] == ["from scratch", "resumed"]


def test_steps_past_the_resume_point_that_were_not_trained_again_are_superseded(tmp_path: Path) -> None:
    ctx = write_attempts(tmp_path, [[(0, 0.1), (2, 0.2), (4, 0.3)], [(2, 0.21)]], [0, 2])
    assert curve_of(ctx) == [(0, 1, 0.1), (2, 2, 0.21)]  # step 4 belonged to weights attempt 2 discarded


def test_a_restarted_attempt_replaces_the_curve_and_is_marked(tmp_path: Path) -> None:
    ctx = write_attempts(tmp_path, [[(0, 0.1), (2, 0.2), (4, 0.3), (6, 0.4)], [(0, 0.1), (2, 0.25)]], [0, 0])
    assert curve_of(ctx) == [(0, 2, 0.1), (2, 2, 0.25)]  # not attempt 1's 4 and 6 mixed into attempt 2's run
    curve = attempt_curve(ctx, file_usable=True)
    assert curve is not None and [s["how"] for s in curve.lineage] == ["from scratch", "restarted"]
    assert all("restarted" in g["why"] for g in curve.superseded) and len(curve.superseded) == 4


def test_offsets_that_no_longer_fit_the_file_give_no_per_attempt_curve(tmp_path: Path) -> None:
    ctx = write_attempts(tmp_path, [[(0, 0.1), (2, 0.2)], [(2, 0.3)]], [0, 2])
    Path(ctx.val_path).write_text(val_line(0, 0.1), encoding="utf-8")  # rewritten, shorter than offsets
    assert attempt_curve(ctx, file_usable=True) is None
    old = ctx.model_copy(update={"attempts": [a.model_copy(update={"val_offset": None}) for a in ctx.attempts]})
    assert attempt_curve(old, file_usable=True) is None  # an older record: offsets unknown


def test_start_facts_as_agentjet_and_verl_print_them() -> None:
    lines = ["2026-01-29 17:41:34.123 | INFO     | ajet.utils.config_utils:prepare_experiment_config:285 - "
             "Experiment Name: math_20260129_1741",
             "Load from checkpoint folder: /c/saved_checkpoints/p/math_20260129_1741/global_step_4",
             "Setting global step to 4", "Resuming from /c/saved_checkpoints/p/math_20260129_1741/global_step_4"]
    facts = parse_start(lines)
    assert (facts.experiment_name, facts.start_step) == ("math_20260129_1741", 4)
    assert facts.resumed_from.endswith("global_step_4")
    scratch = parse_start(["Experiment Name: x_20260101_0000", "Training from scratch"])
    assert (scratch.start_step, scratch.resumed_from) == (0, "")
    assert parse_start(["nothing here"]).start_step is None


def test_naming_and_checkpoint_layout() -> None:
    assert explicit_name({"ajet": {"experiment_name": "a|b"}}) == "a-b"
    assert explicit_name({"ajet": {"experiment_name": "read_yaml_name"}}) is None
    assert explicit_name({"ajet": {}}) is None
    assert agentjet_name("/x/tests/math.yaml", 0.0).startswith("math_19700101_") or agentjet_name(
        "/x/tests/math.yaml", 0.0).startswith("math_1969")
    assert checkpoint_dir({}, "n", "/code") == "/code/saved_checkpoints/ajet_default_project/n"
    data = {"ajet": {"project_name": "p", "trainer_common": {"checkpoint_base_dir": "/abs/ck"}}}
    assert checkpoint_dir(data, "n", "/code") == "/abs/ck/p/n"
