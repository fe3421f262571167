"""The `finish.flag` that tells a waiting client the experiment is over.

Clients (people, CI jobs, the research agent) poll for `<exp_result_dir>/finish.flag` and
read the report as soon as it appears, so the flag must be written after everything else
and must never be seen half-written: it is written by the confined writer
(ajet_runner.resultdir.confined: a temp file in the same directory, fsynced, renamed over the
target relative to the directory's fd), which also writes every other result file; its
atomic writes are re-exported here for the callers that write beside the flag.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ajet_runner.resultdir.confined import TEMP_PREFIX, atomic_write_bytes, atomic_write_text, open_dir, remove_file

__all__ = ["FLAG_NAME", "TEMP_PREFIX", "atomic_write_bytes", "atomic_write_text", "clear_finish_flag", "iso_utc",
           "read_finish_flag", "remove_file", "remove_temp_files", "write_error_reason", "write_finish_flag"]

FLAG_NAME = "finish.flag"


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
