"""Conformance tier harness: run the REAL AgentJet (agentjet==0.0.1 from PyPI) without a GPU.

Imports nothing of ajet-runner's own packages (tests drive the runner through the
`ajet-runner` CLI, see `runner_cli()`). What it offers:

* `venv_python()` — the conformance venv's interpreter, built by scripts/conformance-venv.sh
  on first use (a lock keeps parallel workers from building twice); `pytest.skip` with the
  reason when the package index cannot be reached.
* `make_codebase(tmp_path)` — a working directory shaped like an AgentJet checkout for the
  launcher: `ajet/default_config/...` (our minimal defaults) and the test YAMLs.
* `env_for(codebase, ...)` — the environment: stand-ins on PYTHONPATH, the fake `ray`,
  `nvidia-smi`, `pgrep`, `ps` and a no-login `bash` first on PATH, a fresh sandbox token.
* `run_launcher(...)`, `kill_sandbox(env)`, `console_lines(text)`.

Safety: `--kill`/`--autokill` in the real launcher kill every process whose command line
holds the keyword. Under `env_for` its `pgrep`/`ps` only see processes that carry this test's
`AJET_CONF_SANDBOX` token, and `bash -l` cannot reset PATH past them (see standins/bin).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
STANDINS = HERE / "standins"
STANDIN_BIN = STANDINS / "bin"
CONFIGS = HERE / "configs"
SCRIPT = REPO / "scripts" / "conformance-venv.sh"
DEFAULT_VENV = REPO / "build" / "conformance-venv"
BUILD_TIMEOUT_S = 1800

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
_RAY_PREFIX = re.compile(r"^\((?:[A-Za-z_][\w.]*) pid=\d+(?:, ip=[\d.]+)?\) ")


def venv_dir() -> Path:
    return Path(os.environ.get("AJET_CONF_VENV", DEFAULT_VENV))


def _index_reachable(python: str, scratch: Path) -> tuple[bool, str]:
    """Can pip fetch agentjet==0.0.1 (no install)? The package index's own client decides."""
    res = subprocess.run(
        [python, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
         "-d", str(scratch), "agentjet==0.0.1"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    return res.returncode == 0, (res.stderr or res.stdout).strip()[-600:]


_PYTHON: str | None = None


def venv_python() -> str:
    """The conformance venv's python; builds it when missing (or skips: index unreachable).

    The script returns at once when the venv's marker matches its hash, so this is cheap.
    """
    global _PYTHON
    if _PYTHON is not None:
        return _PYTHON
    venv = venv_dir()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / (venv.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (pytest-xdist workers, other sessions)
        res = subprocess.run(["bash", str(SCRIPT), str(venv)], capture_output=True, text=True,
                             timeout=BUILD_TIMEOUT_S, check=False)
        if res.returncode != 0:
            scratch = venv.parent / (venv.name + ".probe")
            ok, why = _index_reachable(sys.executable, scratch)
            shutil.rmtree(scratch, ignore_errors=True)
            if not ok:
                pytest.skip(f"package index unreachable, cannot build the conformance venv: {why}")
            raise RuntimeError(f"scripts/conformance-venv.sh failed (exit {res.returncode}):\n"
                               f"{res.stdout[-3000:]}\n{res.stderr[-3000:]}")
    _PYTHON = str(venv / "bin" / "python")
    return _PYTHON


def runner_cli() -> str | None:
    """The `ajet-runner` command next to this interpreter (None when not installed)."""
    candidate = Path(sys.executable).with_name("ajet-runner")
    return str(candidate) if candidate.exists() else shutil.which("ajet-runner")


def make_codebase(tmp_path: Path, name: str = "codebase") -> Path:
    """A cwd for `python -m ajet.launcher`: our `ajet/default_config/` plus the test YAMLs.

    No `ajet/__init__.py` is written, so `import ajet` keeps resolving to the installed wheel
    (a directory without `__init__.py` is only a namespace-package candidate).
    """
    root = tmp_path / name
    shutil.copytree(CONFIGS / "codebase", root)
    for yaml_file in CONFIGS.glob("*.yaml"):
        shutil.copy2(yaml_file, root / yaml_file.name)
    (root / ".conformance").mkdir()
    # A swarm client where AgentJet's skills expect one (python -m tutorial.example_appworld_swarm.agent_roll).
    client = root / "tutorial" / "example_appworld_swarm"
    client.mkdir(parents=True)
    (root / "tutorial" / "__init__.py").write_text("")
    (client / "__init__.py").write_text("")
    (client / "agent_roll.py").write_text(
        '"""Conformance stand-in for the swarm client (see ajet_conformance.swarm_client)."""\n'
        "from ajet_conformance.swarm_client import main\n\n"
        'if __name__ == "__main__":\n    main()\n'
    )
    return root


def env_for(codebase: Path, *, gpus: str | None = "0:81920:0", extra: dict[str, str] | None = None,
            colour: bool = False) -> dict[str, str]:
    """Environment for the real launcher under the stand-ins.

    `gpus`: AJET_CONF_GPUS for the fake nvidia-smi (`index:total_MiB:used_MiB,...`; "" lists none).
    `extra`: more variables (AJET_CONF_* knobs of the stand-in trainer, for instance).
    """
    python = venv_python()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AJET_CONF_")}
    for leak in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "CUDA_VISIBLE_DEVICES"):
        env.pop(leak, None)
    state = codebase / ".conformance"
    state.mkdir(exist_ok=True)
    env.update({
        "PATH": os.pathsep.join([str(STANDIN_BIN), str(Path(python).parent), env.get("PATH", "/usr/bin:/bin")]),
        "PYTHONPATH": str(STANDINS),
        "PYTHONUNBUFFERED": "1",
        "AJET_CONF_SANDBOX": uuid.uuid4().hex,
        "AJET_CONF_RAY_CLI": str(STANDIN_BIN / "ray"),
        "AJET_CONF_RAY_STATE": str(state / "ray-head.json"),
        "AJET_CONF_RAY_LOG": str(state / "ray-calls.jsonl"),
        "LOGURU_COLORIZE": "YES" if colour else "NO",
        "TOKENIZERS_PARALLELISM": "false",
    })
    if not colour:
        env["RAY_COLOR_PREFIX"] = "0"
    if gpus is not None:
        env["AJET_CONF_GPUS"] = gpus
    env.update(extra or {})
    return env


def run_launcher(codebase: Path, *args: str, env: dict[str, str], timeout: float = 240,
                 ) -> subprocess.CompletedProcess[str]:
    """`python -m ajet.launcher ARGS` in `codebase`; stdout and stderr merged as a terminal shows them."""
    return subprocess.run(
        [venv_python(), "-m", "ajet.launcher", *args],
        cwd=codebase, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=timeout, check=False,
    )


def sandbox_pids(env: dict[str, str]) -> list[int]:
    needle = f"AJET_CONF_SANDBOX={env['AJET_CONF_SANDBOX']}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                if needle in fh.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue
    return pids


def kill_sandbox(env: dict[str, str], grace_s: float = 2.0) -> list[int]:
    """End every process that carries this environment's sandbox token (companions included)."""
    pids = sandbox_pids(env)
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace_s
        while sig == signal.SIGTERM and time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.05)
    return pids


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def console_lines(text: str) -> list[str]:
    """Lines as a parser should see them: ANSI codes and Ray's `(Actor pid=N) ` prefix removed."""
    out = []
    for raw in text.splitlines():
        for piece in raw.split("\r"):
            line = _RAY_PREFIX.sub("", _ANSI.sub("", piece))
            out.append(line)
    return out
