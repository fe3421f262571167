"""Atomic file writes and the `finish.flag` that tells a waiting client the experiment is over.

Clients (people, CI jobs, the research agent) poll for `<exp_result_dir>/finish.flag` and
read the report as soon as it appears, so the flag must be written after everything else
and must never be seen half-written: every file goes to a temp file in the same directory,
is fsynced, then renamed over the target with `os.replace` (atomic on POSIX).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

FLAG_NAME = "finish.flag"
TEMP_PREFIX = ".ajet-tmp-"
_DEFAULT_MODE = 0o644  # result files are for people to read; mkstemp would leave 0600


def _fsync_dir(directory: Path) -> None:
    """Make the rename itself durable (best effort: some filesystems refuse O_RDONLY dirs)."""
    with contextlib.suppress(OSError):
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` so readers see the old file or the whole new one, never a part."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = target.stat().st_mode & 0o7777
    except OSError:
        mode = _DEFAULT_MODE
    fd, tmp = tempfile.mkstemp(prefix=f"{TEMP_PREFIX}{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(target.parent)
    return target


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
        (Path(result_dir) / FLAG_NAME).unlink()
    except FileNotFoundError:
        return False
    return True
