"""Where a watcher is in its log, saved beside the log so an adopting worker resumes from there.

A restarted worker re-adopting a run with a 5 GB log must not read it again from byte 0 (minutes
blind): `save` writes the scanner's state (offset, open findings and evidence, partial line, log
tail, console metrics, the rule clocks) to `<log stem>.scan.json` atomically every SAVE_BYTES of
log read and every SAVE_EVERY seconds, and `load` gives it back if it still describes the same log
file (same inode and first bytes, not truncated).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from ajet_runner.resultdir.confined import atomic_write_bytes

log = logging.getLogger(__name__)
SAVE_EVERY = 30.0  # seconds between checkpoints while the log grows slowly (a save is a rename: ~0.4 ms) ...
SAVE_BYTES = 4 << 20  # ... and at least every this many bytes scanned: an adopter reads at most that much again


def checkpoint_path(log_path: str | os.PathLike[str]) -> Path:
    path = Path(log_path)
    return path.with_name(path.stem + ".scan.json")


HEAD_BYTES = 4096


def _head(log_path: str | os.PathLike[str], upto: int) -> str:
    """A fingerprint of the log's first bytes: an inode number can be reused by a new file."""
    with open(log_path, "rb") as f:
        return head_of(f.read(min(HEAD_BYTES, upto)))


def head_of(first_bytes: bytes) -> str:
    """The fingerprint of a log's first (at most HEAD_BYTES) bytes."""
    return hashlib.sha1(first_bytes[:HEAD_BYTES]).hexdigest()


def save(log_path: str | os.PathLike[str], state: dict[str, Any], *, inode: int | None = None,
         head: str | None = None) -> bool:
    """Write `state` (with the log's inode) atomically; False (logged) when the disk refuses. A caller
    that holds the log open passes its `inode` and, once the log is past HEAD_BYTES, its `head`.

    Not fsynced: the checkpoint serves a worker restarted on a live node (the runs live on in tmux); a
    node that goes down takes its runs with it, and a checkpoint lost that way is only a longer scan."""
    target = checkpoint_path(log_path)
    try:
        state = {**state, "inode": os.stat(log_path).st_ino if inode is None else inode,
                 "head": head if head is not None else _head(log_path, int(state["offset"]))}
        # The result dir's one writer: temp file + renameat in the logs dir, no symlink followed.
        atomic_write_bytes(target, json.dumps(state, separators=(",", ":")).encode("utf-8"), durable=False)
        return True
    except OSError as exc:  # a full disk must not stop the watch; the next worker re-reads more
        log.warning("could not save the scan checkpoint %s: %s", target, exc)
        return False


def load(log_path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The saved state if it belongs to this log as it is now, else None."""
    try:
        state = json.loads(checkpoint_path(log_path).read_text(encoding="utf-8"))
        st = os.stat(log_path)
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("inode") != st.st_ino:
        return None
    offset = state.get("offset")
    if not isinstance(offset, int) or offset < 0 or offset > st.st_size:
        return None  # truncated or replaced since: start over
    try:
        if state.get("head") != _head(log_path, offset):
            return None
    except OSError:
        return None
    return state


def remove(log_path: str | os.PathLike[str]) -> None:
    with contextlib.suppress(OSError):
        checkpoint_path(log_path).unlink()
