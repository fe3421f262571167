"""Move an earlier run's files out of the way before a new run uses the same result dir.

`finish.flag` is a waiting client's only "done" signal and AgentJet appends to its result
files, so a reused result dir must hold nothing of an earlier run when a new one is
submitted: the earlier files go to `previous/<finished_at or now>/` (moved, never deleted
or overwritten), and the new run's report links them.

Only a dir that holds runner files is emptied wholesale. When the dir also holds the
codebase (or holds no runner file at all), only the names the runner itself writes move.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from ajet_runner.resultdir.flag import FLAG_NAME
from ajet_runner.resultdir.names import LOGS_DIR, PLOT_NAME, REPAIR_LOG_NAME, REPORT_NAME, RESULTS_NAME

PREVIOUS_DIR = "previous"
RUNNER_NAMES = (
    FLAG_NAME, REPORT_NAME, RESULTS_NAME, PLOT_NAME, REPAIR_LOG_NAME, LOGS_DIR,
    "config.original.yaml", "config.patched.yaml", "saved_val_result", "saved_train_result",
    "checkpoints",  # a run's own verl checkpoints (statemachine/checkpoints.py ISOLATED_DIR)
)
_MARKERS = (FLAG_NAME, REPORT_NAME, RESULTS_NAME, REPAIR_LOG_NAME)


def _stamp(result_dir: Path) -> str:
    """The earlier run's `finished_at` (from its flag), else the newest file time, as a dir name."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        data = json.loads((result_dir / FLAG_NAME).read_text(encoding="utf-8"))
        text = str(data.get("finished_at") or "")
        if re.fullmatch(r"[0-9T:\-+.Z]{10,40}", text):
            return text.replace(":", "-")
    newest = 0.0
    with contextlib.suppress(OSError):
        for entry in os.scandir(result_dir):
            if entry.name != PREVIOUS_DIR:
                with contextlib.suppress(OSError):
                    newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
    moment = datetime.fromtimestamp(newest or time.time(), tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H-%M-%SZ")


def _inside(path: str, root: Path) -> bool:
    try:
        real, base = os.path.realpath(path), os.path.realpath(root)
    except (OSError, ValueError):
        return False
    return real == base or real.startswith(base.rstrip("/") + "/")


def earlier_run_files(result_dir: str | os.PathLike[str], codebase: str = "") -> list[str]:
    """The entries of `result_dir` an archive would move (sorted names)."""
    root = Path(result_dir)
    try:
        names = sorted(e.name for e in os.scandir(root))
    except OSError:
        return []
    names = [n for n in names if n != PREVIOUS_DIR and not n.startswith(".ajet-tmp-")]
    ours = [n for n in names if n in RUNNER_NAMES]
    wholesale = any(n in _MARKERS for n in names) and not (codebase and _inside(codebase, root))
    return names if wholesale else ours


def archive_previous_run(result_dir: str | os.PathLike[str], codebase: str = "") -> str:
    """Move an earlier run's files into `previous/<stamp>/`; returns that path relative to the
    result dir (`""` when there was nothing to move). Raises OSError when a move fails."""
    root = Path(result_dir)
    names = earlier_run_files(root, codebase)
    if not names:
        return ""
    stamp = _stamp(root)
    target = root / PREVIOUS_DIR / stamp
    n = 1
    while target.exists():
        target = root / PREVIOUS_DIR / f"{stamp}-{n}"
        n += 1
    target.mkdir(parents=True)
    # The flag first: from this moment no client can take the earlier run's flag for this run's.
    for name in sorted(names, key=lambda x: x != FLAG_NAME):
        os.replace(root / name, target / name)
    return str(target.relative_to(root))
