"""Job functions the watcher tests enqueue (imported by the real watcher process by name)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


def hold(work: str, name: str) -> str:
    """Say it started (pid and thread), then wait until `release` exists (at most 60 s)."""
    root = Path(work)
    (root / f"started-{name}").write_text(f"{os.getpid()} {threading.get_ident()}")
    deadline = time.monotonic() + 60
    while not (root / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return name


def fail(name: str) -> str:
    raise RuntimeError(f"job {name} failed on purpose")
