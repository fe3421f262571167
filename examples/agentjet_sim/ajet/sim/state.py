"""What a run leaves on disk between attempts: checkpoints (resume) and failure markers.

Both live under the working directory (the codebase root), keyed by experiment name, so
a relaunch with the same name resumes and a `first_attempt` failure does not repeat.
"""

from __future__ import annotations

import os
import time
from pathlib import Path


def state_dir(cwd: Path, experiment: str) -> Path:
    return cwd / ".sim_state" / experiment


def failure_marker(cwd: Path, experiment: str, signature: str) -> Path:
    return state_dir(cwd, experiment) / f"failed-{signature}"


def mark_failed(cwd: Path, experiment: str, signature: str) -> None:
    marker = failure_marker(cwd, experiment, signature)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("failed once\n", encoding="utf-8")


def checkpoint_dir(cwd: Path, base: str, project: str, experiment: str) -> Path:
    """verl's `trainer.default_local_dir`: {checkpoint_base_dir}/{project_name}/{experiment_name},
    relative to the trainer's working directory."""
    root = Path(base) if os.path.isabs(base) else cwd / base
    return root / project / experiment


def launch_time(cwd: Path, minutes_apart: bool) -> float:
    """The time an experiment name is stamped with: now, or (`minutes_apart`) one minute after the
    previous launch's stamp in this working directory, as relaunches hours apart would be."""
    now = time.time()
    if not minutes_apart:
        return now
    clock = cwd / ".sim_state" / "name_clock"
    try:
        last = float(clock.read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        last = now - 60
    stamp = max(now, last + 60)
    clock.parent.mkdir(parents=True, exist_ok=True)
    clock.write_text(f"{stamp}\n", encoding="utf-8")
    return stamp


def latest_checkpoint(ckpt: Path) -> int:
    """The last saved global step, 0 when there is none (training from scratch). As verl's
    find_latest_ckpt_path: the tracker file names the step, and its global_step_N dir must exist."""
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    try:
        step = int(tracker.read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        return 0
    return step if step > 0 and (ckpt / f"global_step_{step}").is_dir() else 0


def save_checkpoint(ckpt: Path, step: int) -> Path:
    step_dir = ckpt / f"global_step_{step}"
    step_dir.mkdir(parents=True, exist_ok=True)
    (step_dir / "actor").mkdir(exist_ok=True)
    tmp = ckpt / "latest_checkpointed_iteration.txt.tmp"
    tmp.write_text(f"{step}\n", encoding="utf-8")
    os.replace(tmp, ckpt / "latest_checkpointed_iteration.txt")
    return step_dir
