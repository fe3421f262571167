"""Companion daemons (`--with-ray`, `--with-appworld`, ...) and the `--autokill` dry run.

A companion is a harmless sleeping python process in its own session that outlives the
launcher, as `ray start --head --block` does, so a runner has to clean it up. It ends by
itself after `ray_daemon_seconds` so a forgotten one cannot linger for ever.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

_DAEMON_CODE = "import sys, time; time.sleep(float(sys.argv[1]))"

COMMANDS = {
    "ray": ["ray::head", "start", "--head", "--block", "--port=6379"],
    "appworld": ["appworld", "serve", "environment", "--port=8080"],
}


def pidfile(cwd: Path, name: str) -> Path:
    return cwd / ".sim_state" / "companions" / f"{name}.pid"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


def running(cwd: Path, name: str) -> int | None:
    try:
        pid = int(pidfile(cwd, name).read_text(encoding="utf-8").strip())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def start(cwd: Path, name: str, lifetime: float) -> tuple[int, bool]:
    """(pid, started_now): reuse a live one, as the real launcher's LaunchCommandWhenAbsent does."""
    existing = running(cwd, name)
    if existing:
        return existing, False
    argv = COMMANDS.get(name, [name, "serve"])
    log_dir = cwd / ".sim_state" / "companions"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-c", _DAEMON_CODE, str(lifetime), *argv, f"--temp-dir={cwd / '.sim_state'}"],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            cwd=str(cwd),
        )
    pidfile(cwd, name).write_text(f"{proc.pid}\n", encoding="utf-8")
    return proc.pid, True


def matching_pids(keyword: str) -> list[int]:
    """PIDs whose command line contains `keyword` (what the real autokill would kill)."""
    me = os.getpid()
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if keyword in cmdline:
            found.append(int(entry))
    return sorted(found)


def record_autokill(cwd: Path, plan: dict[str, list[int]]) -> Path:
    """Keep what would have been killed, so a test can show the hazard without suffering it."""
    out = cwd / ".sim_state" / "autokill_would_kill.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(plan, indent=2) + "\n", encoding="utf-8")
    return out
