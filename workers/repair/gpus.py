"""Ask `nvidia-smi` what the GPUs hold, and whether this run's launcher can skip its own GPU check.

The parsing and the 95 % rule are pure (statemachine/fixes/gpu_check.py); this module only runs the
programs and reads files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ajet_runner.statemachine.fixes.gpu_check import QUERY, GpuMemory, launcher_accepts_skip, parse_query

__all__ = ["launcher_skip_support", "query_gpus"]

TIMEOUT = 15.0
_FIND_LAUNCHER = ("import importlib.util as u, sys; s = u.find_spec('ajet'); "
                  "print(*(s.submodule_search_locations or []) if s else [], sep='\\n')")


def query_gpus(path: str | None = None) -> tuple[list[GpuMemory] | None, str]:
    """(GPUs, "") or (None, why not): `nvidia-smi --query-gpu=index,name,memory.total,memory.used`.

    `path` is the PATH to look nvidia-smi up in (default: this process's)."""
    exe = shutil.which("nvidia-smi", path=path)
    if not exe:
        return None, "nvidia-smi is not installed on this node (not on PATH)"
    try:
        done = subprocess.run([exe, *QUERY], capture_output=True, text=True, timeout=TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"nvidia-smi could not be run: {exc}"
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip().splitlines()
        return None, f"nvidia-smi failed (exit {done.returncode}){': ' + detail[0] if detail else ''}"
    try:
        return parse_query(done.stdout), ""
    except ValueError as exc:
        return None, str(exc)


def _installed_launchers(workdir: str, python: str) -> list[Path]:
    """The launcher files of the `ajet` package the venv's python finds from `workdir` (not imported)."""
    if not python or not os.path.exists(python):
        return []
    try:
        done = subprocess.run([python, "-c", _FIND_LAUNCHER], cwd=workdir or None, capture_output=True,
                              text=True, timeout=TIMEOUT, check=False)
    except (OSError, subprocess.SubprocessError):
        return []
    return [Path(p) / "launcher.py" for p in done.stdout.splitlines() if p.strip()]


def launcher_skip_support(workdir: str, python: str) -> tuple[bool | None, str]:
    """Whether `python -m ajet.launcher`, run from `workdir`, accepts `--skip-check-avail-gpu`.

    The launcher is `workdir/ajet/launcher.py` when the command runs from an AgentJet checkout (the
    usual case), else the `ajet` package the venv's python finds (located without importing it).
    Returns (answer, the file read); (None, why) when it cannot be found."""
    local = Path(workdir) / "ajet" / "launcher.py"
    candidates = [local] if local.is_file() else _installed_launchers(workdir, python)
    for path in candidates:
        try:
            return launcher_accepts_skip(path.read_text(encoding="utf-8", errors="replace")), str(path)
        except OSError:
            continue
    return None, "the AgentJet launcher (ajet/launcher.py) was not found"
