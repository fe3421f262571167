"""Test doubles for driving an experiment without tmux: an in-memory runner and seeded records.

`InMemoryRunner` stands in for `ajet_runner.workers.process.tmux.TmuxRunner`: `start()` "runs" the next scripted attempt
at once (writes its log lines, and its exit code unless it is to keep running until stopped). The
store stays real (the tests' throwaway redis-server), so every transition still goes through the
compare-and-set script.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.blueprint import parse_blueprint
from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.store.records import Context
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from ajet_runner.workers.process.tmux import RunHandle

SIGINT_EXIT = 130


@dataclass
class Script:
    """One attempt: what it prints and how it ends (None: runs until stopped)."""

    lines: list[str] = field(default_factory=list)
    exit_code: int | None = 0


@dataclass
class Started:
    session: str
    command: str
    env: dict[str, str]
    cwd: str


class InMemoryRunner:
    """The TmuxRunner methods the driver calls, with scripted attempts and no processes."""

    socket_path: str | None = None

    def __init__(self, *scripts: Script) -> None:
        self.scripts = list(scripts)
        self.started: list[Started] = []
        self.sessions: set[str] = set()
        self.stopped: list[str] = []

    # -- sessions
    def remote(self, refresh: bool = False) -> bool:
        return False

    def exists(self, session: str) -> bool:
        return session in self.sessions

    def kill_session(self, session: str) -> None:
        self.sessions.discard(session)

    def start(self, session: str, command: str, *, cwd: str, env: Mapping[str, str], log_path: Path,
              rc_path: Path, pid_path: Path, **_: Any) -> RunHandle:
        if not self.scripts:
            raise RuntimeError(f"no scripted attempt left for {command!r}")
        script = self.scripts.pop(0)
        self.started.append(Started(session, command, dict(env), cwd))
        self.sessions.add(session)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text("".join(f"{line}\n" for line in script.lines), encoding="utf-8")
        pid_path.write_text("4242\n", encoding="utf-8")
        if script.exit_code is not None:
            rc_path.write_text(f"{script.exit_code}\n", encoding="utf-8")
        return RunHandle(session=session, log_path=log_path, rc_path=rc_path, pid_path=pid_path,
                         wrapper_path=log_path.with_suffix(".sh"), pid=4242, started_at=time.time())

    # -- the command
    def is_running(self, handle: RunHandle) -> bool:
        return not handle.rc_path.exists()

    def exit_code(self, handle: RunHandle) -> int | None:
        try:
            return int(handle.rc_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def wait_for_exit(self, handle: RunHandle, timeout: float) -> int | None:
        return self.exit_code(handle)

    def stop(self, handle: RunHandle, grace: float) -> int | None:
        self.stopped.append(handle.session)
        if not handle.rc_path.exists():
            handle.rc_path.write_text(f"{SIGINT_EXIT}\n", encoding="utf-8")
        return self.exit_code(handle)

    def kill_marked(self, name: str, value: str, grace: float) -> list[int]:
        return []


BLUEPRINT = """# Driver test
[exp_purpose] a driver test run
[exp_codebase_dir] {code}
[exp_venv_exe] {python}
[exp_yaml_path] {code}/conf.yaml
[exp_launch_command]
```bash
{command}
```
[exp_result_dir] {results}
[exp_max_time] {max_time}
"""

YAML = """ajet:
  execute_test: False
  trainer_common:
    val_before_train: True
    logger: tensorboard
    test_freq: 5
hydra:
  searchpath:
    - file://ajet/default_config
defaults:
  - ajet_default
  - _self_
"""


def settings_for(redis_url: str, **overrides: Any) -> Settings:
    """Fast settings: short polls and graces, no adviser, a small result-dir reserve."""
    base: dict[str, Any] = {"redis_url": redis_url, "poll_interval": 0.01, "stop_grace_seconds": 0.1,
                            "capacity_wait_seconds": 0.1, "result_reserve_bytes": 1024, "llm_url": "",
                            "repair_hook": "", "diagnosis_settle_seconds": 0.0}
    return Settings(**{**base, **overrides})


LAUNCH = "python -m ajet.launcher --conf conf.yaml --backbone verl"


def blueprint_text(tmp_path: Path, command: str = LAUNCH, max_time: str = "1 hour") -> str:
    code = tmp_path / "code"
    code.mkdir(exist_ok=True)
    (code / "conf.yaml").write_text(YAML, encoding="utf-8")
    return BLUEPRINT.format(code=code, python=sys.executable, results=tmp_path / "results", command=command,
                            max_time=max_time)


def seed(store: Store, exp_id: str, tmp_path: Path, *, state: str = "queued", attempt: int = 0,
         ctx: Context | None = None, command: str = LAUNCH, max_time: str = "1 hour", **fields: Any) -> None:
    """A record as submission (and earlier driving, for later states) would have left it."""
    bp = parse_blueprint(blueprint_text(tmp_path, command, max_time))
    lc = Lifecycle(id=exp_id, state=state, attempt=attempt)
    store.create(exp_id, {
        "state": state, "lifecycle": lc.to_dict(), "purpose": bp.exp_purpose, "result_dir": bp.exp_result_dir,
        "blueprint_json": bp.stored(), "attempt": attempt, "gpus_needed": 1, "queue": "default",
        "ctx": (ctx or Context()).to_json(), **fields,
    }, {"message": "seeded by a test"})
