"""Why an ended attempt has no usable exit code, when the cause can be named: a full disk or a
result dir that is no longer where it was checked. Read by the driver once the command is gone.

The wrapper writes the code into the result dir's `logs/` when the command ends. On a disk that is
full at that moment it frees the result dir's reserve and writes the code with a `record-error:`
note; with no reserve to free, no code is written at all and the full filesystem is the cause.
A logs dir swapped for a symlink (or moved) is never written through: the roots name the cause.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ajet_runner.resultdir.roots import OutsideRoots, check_inside
from ajet_runner.workers.executors.handle import exit_record_note

_ERRNO_OF_TEXT = {os.strerror(code): name for code, name in errno.errorcode.items()}


@dataclass(frozen=True)
class RecordProblem:
    """`code` is an errno name (ENOSPC, EACCES) for the `result_write_failures` metric; `reason` starts with it."""

    code: str
    path: str
    reason: str


def exit_record_problem(rc_path: Path, result_dir: str, roots: Sequence[str]) -> RecordProblem | None:
    """The named cause, or None (the code is there, or it is missing for a reason we cannot tell)."""
    note = exit_record_note(rc_path)
    if note:
        code = _ERRNO_OF_TEXT.get(note, "EIO")
        return RecordProblem(code, str(rc_path), f"{code} ({note}): {rc_path} — the disk was full when the "
                                                 "command ended; the exit code was written after freeing the reserve")
    if rc_path.exists():
        return None
    for path in (result_dir, str(rc_path.parent)):
        try:
            check_inside(path, roots)
        except OutsideRoots as exc:
            return RecordProblem("EACCES", str(rc_path), f"EACCES ({exc}): {rc_path} was not written")
    try:
        st = os.statvfs(rc_path.parent)
    except OSError:
        return None
    if st.f_bavail == 0:
        return RecordProblem("ENOSPC", str(rc_path), f"ENOSPC ({os.strerror(errno.ENOSPC)}): {rc_path} — the disk "
                                                     "was full when the command ended, so the exit code was lost")
    return None
