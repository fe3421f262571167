"""Command rewriting the driver delegates: `--conf` at the patched copy, the shared-GPU flag."""

from __future__ import annotations

from ajet_runner.statemachine.fixes.preflight import SKIP_GPU_CHECK, shared_gpus_change
from ajet_runner.statemachine.shell.command import point_command_at

CMD = "python -m ajet.launcher --conf tests/bench/x/x.yaml --backbone verl"


def test_conf_points_at_the_copy_relative_to_the_codebase_when_inside_it() -> None:
    inside = point_command_at(CMD, "/code/.ajet-runner/e1/x.yaml", "/code")
    assert "--conf .ajet-runner/e1/x.yaml" in inside
    assert "--conf /elsewhere/x.yaml" in point_command_at(CMD, "/elsewhere/x.yaml", "/code")
    assert point_command_at("python train.py", "/code/x.yaml", "/code") == "python train.py"


def test_the_gpu_check_is_skipped_only_on_a_shared_node() -> None:
    change = shared_gpus_change(CMD, [0, 1], node_gpus=4)
    assert change is not None and change.new.endswith(SKIP_GPU_CHECK) and change.old == CMD
    assert "GPUs [0, 1]" in change.reason
    assert shared_gpus_change(CMD, [0, 1, 2, 3], node_gpus=4) is None  # the whole node: the check is right
    assert shared_gpus_change(CMD, None, node_gpus=4) is None  # GPUs not managed here
    assert shared_gpus_change("python train.py", [0], node_gpus=4) is None  # not the launcher
    assert shared_gpus_change(change.new, [0, 1], node_gpus=4) is None  # already there
