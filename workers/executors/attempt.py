"""Everything one launch needs: its files, its environment, its tmux session."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ajet_runner.statemachine.models import Blueprint

MARKER = "AJET_RUNNER_EXPERIMENT"


def attempt_paths(result_dir: str, attempt: int) -> dict[str, Path]:
    logs = Path(result_dir) / "logs"
    return {name: logs / f"attempt-{attempt}.{name}" for name in ("log", "rc", "pid")}


def attempt_env(bp: Blueprint, exp_id: str, overrides: Mapping[str, str], gpus: list[int] | None,
                base_path: str | None = None) -> dict[str, str]:
    """The variables the wrapper exports: the blueprint's venv first on PATH, our marker, GPUs.

    `python` in the user's command must be the blueprint's python, so the venv's bin leads PATH
    and VIRTUAL_ENV is set, as `source .venv/bin/activate` would.
    """
    venv_bin = os.path.dirname(bp.exp_venv_exe)
    env = {
        "PATH": f"{venv_bin}:{base_path if base_path is not None else os.environ.get('PATH', '')}",
        "VIRTUAL_ENV": os.path.dirname(venv_bin),
        "PYTHONUNBUFFERED": "1",
        MARKER: exp_id,
    }
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    env.update(overrides)
    return env
