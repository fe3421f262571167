"""The preflight's GPU-check decision after `--autokill` is stripped, and its refusal to let a new
experiment continue another one's checkpoints (statemachine/fixes/preflight.py, statemachine/fixes/gpu_check.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from ajet_runner.statemachine.fixes.gpu_check import (
    GpuMemory,
    describe,
    launcher_accepts_skip,
    parse_query,
    parse_visible,
    too_busy,
)
from ajet_runner.statemachine.fixes.preflight import gpu_check_decision, plan_preflight
from ajet_runner.statemachine.models import Blueprint, Level

CMD = "python -m ajet.launcher --conf tests/x.yaml --backbone verl"


def test_nvidia_smi_rows_and_the_95_percent_rule() -> None:
    gpus = parse_query("0, NVIDIA H100 80GB HBM3, 81559, 48000\n1, NVIDIA H100 80GB HBM3, 81559, 100\n")
    assert [(g.index, g.free) for g in gpus] == [(0, False), (1, True)]
    assert too_busy(gpus, [1]) == [] and too_busy(gpus, [0, 2]) == [
        "GPU 0 is 41.1 % free (< 95 %)", "GPU 2 is not listed by nvidia-smi"]
    assert describe(gpus) == "GPU 0: 41.1 % free, GPU 1: 99.9 % free"
    with pytest.raises(ValueError, match="unexpected nvidia-smi line"):
        parse_query("0, H100, lots, 1\n")
    assert parse_visible("2, 3") == [2, 3] and parse_visible(None) is None and parse_visible("GPU-abc") is None
    assert GpuMemory(0, "x", 0, 0).free_ratio == 0.0


def test_which_launchers_know_the_skip_flag() -> None:
    repo = 'parser.add_argument("--skip-check-avail-gpu", action="store_true", default=False)'
    pypi_001 = 'if (args.backbone != "debug") and (not args.kill) and (not args.autokill):\n    check_avail_gpu()'
    assert launcher_accepts_skip(repo) and not launcher_accepts_skip(pypi_001)


def test_autokill_removed_on_known_gpus_adds_the_skip_flag_and_says_the_runner_checks_them() -> None:
    change, problem = gpu_check_decision(CMD, gpus=[0, 1, 2, 3], node_gpus=4, hazard_removed=True)
    assert problem is None and change is not None and change.new == f"{CMD} --skip-check-avail-gpu"
    assert "--autokill/--kill was removed" in change.reason and "checks GPUs 0,1,2,3 itself" in change.reason
    assert gpu_check_decision(change.new, gpus=[0], node_gpus=4, hazard_removed=True) == (None, None)


def test_autokill_removed_on_unknown_gpus_warns_that_the_launchers_check_will_run() -> None:
    change, problem = gpu_check_decision(CMD, gpus=None, node_gpus=0, hazard_removed=True)
    assert change is None and problem is not None and problem.level == Level.warning
    assert "the launcher will check its rule" in problem.message and "does not assign GPUs" in problem.message


def test_a_launcher_without_the_flag_keeps_its_check_and_says_so() -> None:
    change, problem = gpu_check_decision(CMD, gpus=[1], node_gpus=4, hazard_removed=False, skip_supported=False,
                                         launcher="/venv/lib/ajet/launcher.py")
    assert change is None and problem is not None
    assert "/venv/lib/ajet/launcher.py) has no --skip-check-avail-gpu" in problem.message
    assert gpu_check_decision(CMD, gpus=[0, 1, 2, 3], node_gpus=4, hazard_removed=False) == (None, None)
    assert gpu_check_decision("bash train.sh", gpus=None, node_gpus=0, hazard_removed=True) == (None, None)


YAML = """ajet:
  project_name: proj
{name}  trainer_common:
    val_before_train: True
    logger: tensorboard
hydra:
  searchpath:
    - file://ajet/default_config
defaults:
  - ajet_default
  - _self_
"""


def checkpoint(codebase: Path, name: str, step: int) -> Path:
    ckpt = codebase / "saved_checkpoints" / "proj" / name
    (ckpt / f"global_step_{step}").mkdir(parents=True)
    (ckpt / "latest_checkpointed_iteration.txt").write_text(f"{step}\n", encoding="utf-8")
    return ckpt


def plan_for(tmp_path: Path, name_line: str, now: float | None = None):
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    bp = Blueprint(exp_codebase_dir=str(code), exp_yaml_path="tests/math.yaml",
                   exp_launch_command="python -m ajet.launcher --conf tests/math.yaml",
                   exp_result_dir=str(tmp_path / "results"), exp_max_time_seconds=3600)
    return plan_preflight(bp, YAML.format(name=name_line), env={}, now=now)


def isolated(plan) -> str | None:
    return next((c.new for c in plan.changes if c.key == "ajet.trainer_common.checkpoint_base_dir"), None)


def test_an_explicit_name_with_checkpoints_gets_its_own_checkpoint_dir(tmp_path: Path) -> None:
    assert isolated(plan_for(tmp_path, "  experiment_name: shared\n")) is None  # nothing there yet
    ckpt = checkpoint(tmp_path / "code", "shared", 40)
    plan = plan_for(tmp_path, "  experiment_name: shared\n")
    assert isolated(plan) == str(tmp_path / "results" / "checkpoints")
    [warning] = [p for p in plan.problems if p.field == "ajet.experiment_name"]
    assert f"already has checkpoints in {ckpt} (latest global_step_40)" in warning.message
    assert "trains from step 0" in warning.message


def test_an_unnamed_experiment_colliding_with_this_minutes_name_is_isolated_too(tmp_path: Path) -> None:
    now = time.mktime((2026, 1, 29, 17, 41, 10, 0, 0, -1))
    checkpoint(tmp_path / "code", "math_20260129_1741", 8)
    assert isolated(plan_for(tmp_path, "", now=now)) == str(tmp_path / "results" / "checkpoints")
    assert isolated(plan_for(tmp_path, "", now=now + 3600)) is None  # an hour later: another name
    assert isolated(plan_for(tmp_path, "", now=now - 30)) is not None  # launched in the next minute: same name
