"""What a run leaves on disk between attempts: checkpoints (resume) and failure markers.

Both live under the working directory (the codebase root), keyed by experiment name, so
a relaunch with the same name resumes and a `first_attempt` failure does not repeat.
"""

from __future__ import annotations

import os
from pathlib import Path


def state_dir(cwd: Path, experiment: str) -> Path:
    return cwd / ".sim_state" / experiment


def failure_marker(cwd: Path, experiment: str, signature: str) -> Path:
    return state_dir(cwd, experiment) / f"failed-{signature}"


def mark_failed(cwd: Path, experiment: str, signature: str) -> None:
    marker = failure_marker(cwd, experiment, signature)
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("failed once\n", encoding="utf-8")


def checkpoint_dir(cwd: Path, base: str, experiment: str) -> Path:
    root = Path(base) if os.path.isabs(base) else cwd / base
    return root / experiment


def latest_checkpoint(ckpt: Path) -> int:
    """The last saved global step, 0 when there is none (training from scratch)."""
    tracker = ckpt / "latest_checkpointed_iteration.txt"
    try:
        return int(tracker.read_text(encoding="utf-8").strip() or 0)
    except (OSError, ValueError):
        return 0


def save_checkpoint(ckpt: Path, step: int) -> Path:
    step_dir = ckpt / f"global_step_{step}"
    step_dir.mkdir(parents=True, exist_ok=True)
    (step_dir / "actor").mkdir(exist_ok=True)
    tmp = ckpt / "latest_checkpointed_iteration.txt.tmp"
    tmp.write_text(f"{step}\n", encoding="utf-8")
    os.replace(tmp, ckpt / "latest_checkpointed_iteration.txt")
    return step_dir
