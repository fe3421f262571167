"""Move an earlier run's files out of the way before a new run uses the same result dir.

`finish.flag` is a waiting client's only "done" signal and AgentJet appends to its result
files, so a reused result dir must hold nothing of an earlier run when a new one is
submitted: the earlier files go to `previous/<finished_at or now>/` (moved, never deleted
or overwritten), and the new run's report links them.

Only a dir that holds runner files is emptied wholesale. When the dir also holds the
codebase (or holds no runner file at all), only the names the runner itself writes move.

A run's own files are never archived: the driver archives with `owner` (the experiment id) and, before this
run writes anything, leaves `.ajet-runner-run` holding that id. A run taken again by another driver (its
worker killed, Redis restarted between its first files and its `start` transition) finds its own id there
and moves nothing; an earlier run's files (another id, or no marker) move as before, the marker with them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from ajet_runner.resultdir.confined import (
    TEMP_PREFIX,
    atomic_write_at,
    fsync_dir,
    move_at,
    open_dir,
    open_subdir,
    read_at,
)
from ajet_runner.resultdir.flag import FLAG_NAME
from ajet_runner.resultdir.names import LOGS_DIR, PLOT_NAME, REPAIR_LOG_NAME, REPORT_NAME, RESULTS_NAME

PREVIOUS_DIR = "previous"
OWNER_NAME = ".ajet-runner-run"  # the id of the run whose files the dir holds, written before any of them
RUNNER_NAMES = (
    OWNER_NAME, FLAG_NAME, REPORT_NAME, RESULTS_NAME, PLOT_NAME, REPAIR_LOG_NAME, LOGS_DIR,
    "config.original.yaml", "config.patched.yaml", "saved_val_result", "saved_train_result",
    "checkpoints",  # a run's own verl checkpoints (statemachine/logs/checkpoints.py ISOLATED_DIR)
)
_MARKERS = (FLAG_NAME, REPORT_NAME, RESULTS_NAME, REPAIR_LOG_NAME)


def _stamp(dfd: int) -> str:
    """The earlier run's `finished_at` (from its flag, never read through a link), else the newest file
    time, as a dir name."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        data = json.loads(read_at(dfd, FLAG_NAME, 65536).decode("utf-8"))
        text = str(data.get("finished_at") or "")
        if re.fullmatch(r"[0-9T:\-+.Z]{10,40}", text):
            return text.replace(":", "-")
    newest = 0.0
    with contextlib.suppress(OSError):
        for name in os.listdir(dfd):
            if name != PREVIOUS_DIR:
                with contextlib.suppress(OSError):
                    newest = max(newest, os.stat(name, dir_fd=dfd, follow_symlinks=False).st_mtime)
    moment = datetime.fromtimestamp(newest or time.time(), tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H-%M-%SZ")


def _inside(path: str, root: Path) -> bool:
    try:
        real, base = os.path.realpath(path), os.path.realpath(root)
    except (OSError, ValueError):
        return False
    return real == base or real.startswith(base.rstrip("/") + "/")


def _names(listed: list[str], root: Path, codebase: str) -> list[str]:
    names = sorted(n for n in listed if n != PREVIOUS_DIR and not n.startswith(TEMP_PREFIX))
    ours = [n for n in names if n in RUNNER_NAMES]
    wholesale = any(n in _MARKERS for n in names) and not (codebase and _inside(codebase, root))
    return names if wholesale else ours


def earlier_run_files(result_dir: str | os.PathLike[str], codebase: str = "") -> list[str]:
    """The entries of `result_dir` an archive would move (sorted names)."""
    root = Path(result_dir)
    try:
        listed = os.listdir(root)
    except OSError:
        return []
    return _names(listed, root, codebase)


def _owner(dfd: int) -> str:
    """The run id the dir's marker names ("" without one); never read through a link."""
    try:
        return read_at(dfd, OWNER_NAME, 256).decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""


def run_owner(result_dir: str | os.PathLike[str]) -> str:
    """The experiment whose files `result_dir` holds, by its marker ("" when none says)."""
    try:
        rfd = open_dir(Path(result_dir), create=False)
    except OSError:
        return ""
    try:
        return _owner(rfd)
    finally:
        os.close(rfd)


def archive_previous_run(result_dir: str | os.PathLike[str], codebase: str = "", owner: str = "") -> str:
    """Move an earlier run's files into `previous/<stamp>/`; returns that path relative to the
    result dir (`""` when there was nothing to move). Raises OSError when a move fails, and
    SymlinkRefused (an OSError) when `previous` (or the stamp dir) is a symlink.

    With `owner` (the experiment about to write here): the dir is created if missing, nothing moves when
    its marker already names `owner` (these are that run's own files), and the marker is (re)written to
    name `owner` once the earlier run's files are gone.

    Through the confined writer: the result dir opened as a directory fd (inside the allowed roots when
    confined), `previous/` and the stamp dir opened relative to it with O_NOFOLLOW, every entry moved
    with renameat between those fds: nothing is resolved by path once the dir is open, so no link swapped
    in can send the files (or a new directory) anywhere else."""
    root = Path(result_dir)
    try:
        rfd = open_dir(root, create=bool(owner))
    except FileNotFoundError:
        return ""
    try:
        if owner and _owner(rfd) == owner:
            return ""  # this run's own files: it was taken again after its first driver went away
        moved = _move_earlier(rfd, root, codebase)
        if owner:
            atomic_write_at(rfd, OWNER_NAME, f"{owner}\n".encode())
    finally:
        os.close(rfd)
    return moved


def _move_earlier(rfd: int, root: Path, codebase: str) -> str:
    names = _names(os.listdir(rfd), root, codebase)
    if not names:
        return ""
    stamp = _stamp(rfd)
    pfd = open_subdir(rfd, PREVIOUS_DIR, create=True, where=str(root), what="the archive of an earlier run")
    try:
        name, n = stamp, 1
        while True:
            try:
                os.mkdir(name, 0o755, dir_fd=pfd)
                break
            except FileExistsError:  # never reused, never followed if it is a link
                name, n = f"{stamp}-{n}", n + 1
        tfd = open_subdir(pfd, name, where=str(root / PREVIOUS_DIR), what="the archive of an earlier run")
        try:
            # The flag first: from this moment no client can take the earlier run's flag for this run's.
            for entry in sorted(names, key=lambda x: x != FLAG_NAME):
                move_at(rfd, entry, tfd)
            fsync_dir(tfd)
        finally:
            os.close(tfd)
    finally:
        os.close(pfd)
    fsync_dir(rfd)
    return f"{PREVIOUS_DIR}/{name}"
