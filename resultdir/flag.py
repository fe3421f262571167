"""Atomic file writes and the `finish.flag` that tells a waiting client the experiment is over.

Clients (people, CI jobs, the research agent) poll for `<exp_result_dir>/finish.flag` and
read the report as soon as it appears, so the flag must be written after everything else
and must never be seen half-written: every file goes to a temp file in the same directory,
is fsynced, then renamed over the target with `os.replace` (atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ajet_runner.resultdir.roots import open_dir

FLAG_NAME = "finish.flag"
TEMP_PREFIX = ".ajet-tmp-"
_DEFAULT_MODE = 0o644  # result files are for people to read; mkstemp would leave 0600


def _fsync_dir(dir_fd: int) -> None:
    """Make the rename itself durable (best effort: some filesystems refuse fsync on a dir)."""
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes, mode: int | None = None) -> Path:
    """Write `data` to `path` so readers see the old file or the whole new one, never a part.

    openat-style: the directory is opened once (confined to the allowed roots when a
    :func:`ajet_runner.resultdir.roots.confined` block is active), the temp file is created in it with
    O_EXCL|O_NOFOLLOW and renamed relative to that fd, so no symlink is followed out of it.
    On any error (e.g. ENOSPC) the temp file is removed before the error propagates.
    """
    target = Path(path)
    dfd = open_dir(target.parent)
    try:
        if mode is None:
            try:
                mode = os.stat(target.name, dir_fd=dfd, follow_symlinks=False).st_mode & 0o7777
            except OSError:
                mode = _DEFAULT_MODE
        tmp = f"{TEMP_PREFIX}{target.name}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
                os.fchmod(fh.fileno(), mode)
            os.replace(tmp, target.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            if isinstance(exc, OSError) and not os.path.isabs(str(exc.filename or "")):
                exc.filename = str(target)  # the reason names the file, e.g. ENOSPC on finish.flag
            raise
        _fsync_dir(dfd)
    finally:
        os.close(dfd)
    return target


def remove_file(path: str | os.PathLike[str]) -> bool:
    """Unlink `path` relative to its (confined) directory; True if it was there."""
    target = Path(path)
    try:
        dfd = open_dir(target.parent, create=False)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        os.unlink(target.name, dir_fd=dfd)
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)
    return True


def remove_temp_files(result_dir: str | os.PathLike[str]) -> list[str]:
    """Temp files a failed write left behind (ours, and the wrapper's `attempt-N.rc.tmp.<pid>`)."""
    removed = []
    for sub in ("", "logs"):
        directory = Path(result_dir) / sub
        try:
            dfd = open_dir(directory, create=False)
        except OSError:
            continue
        try:
            for name in os.listdir(dfd):
                if name.startswith(TEMP_PREFIX) or (sub == "logs" and ".tmp." in name):
                    with contextlib.suppress(OSError):
                        os.unlink(name, dir_fd=dfd)
                        removed.append(str(directory / name))
        finally:
            os.close(dfd)
    return removed


def write_error_reason(exc: OSError) -> str:
    """`ENOSPC (No space left on device): /path` -- the errno's name, its text and the file."""
    name = errno.errorcode.get(exc.errno or 0, "") if exc.errno else ""
    text = exc.strerror or str(exc)
    where = f": {exc.filename}" if exc.filename else ""
    return f"{name} ({text}){where}" if name else f"{text}{where}"


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """UTF-8 text through :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def iso_utc(epoch: float) -> str:
    """Epoch seconds as an ISO-8601 UTC string with a `Z`, e.g. 2025-01-02T03:04:05Z."""
    moment = datetime.fromtimestamp(epoch, tz=timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def write_finish_flag(
    result_dir: str | os.PathLike[str],
    exp_id: str,
    outcome: str,
    finished_at: float | None = None,
) -> Path:
    """Write `finish.flag` (JSON: id, outcome, finished_at ISO-8601 UTC, finished_at_epoch).

    Call it after the report and the repair log: its presence means "all results are in".
    """
    when = time.time() if finished_at is None else float(finished_at)
    outcome_text = str(getattr(outcome, "value", outcome))
    payload: dict[str, Any] = {
        "id": str(exp_id),
        "outcome": outcome_text,
        "finished_at": iso_utc(when),
        "finished_at_epoch": when,
    }
    return atomic_write_text(Path(result_dir) / FLAG_NAME, json.dumps(payload, indent=2) + "\n")


def read_finish_flag(result_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The flag's JSON, or None when there is no flag.

    A flag that is not our JSON (e.g. an empty file a person touched by hand) still means
    "finished", so it reads as `{"raw": <its text>}` rather than None.
    """
    path = Path(result_dir) / FLAG_NAME
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError:
        return {"raw": ""}
    try:
        data = json.loads(text)
    except ValueError:
        return {"raw": text[:4096]}
    return data if isinstance(data, dict) else {"raw": text[:4096]}


def clear_finish_flag(result_dir: str | os.PathLike[str]) -> bool:
    """Remove a flag left by an earlier run in the same result dir; True if one was removed.

    A stale flag would tell a waiting client the new run is already over, so call this
    before the first launch.
    """
    try:
        dfd = open_dir(result_dir, create=False)
    except FileNotFoundError:
        return False
    try:
        os.unlink(FLAG_NAME, dir_fd=dfd)
    except FileNotFoundError:
        return False
    finally:
        os.close(dfd)
    return True
