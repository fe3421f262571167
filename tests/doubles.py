"""Test doubles for driving an experiment without tmux: the stub executor and seeded records.

`InMemoryRunner` is the product's stub executor (workers/executors/stub.py): `start()` "runs" the next
scripted attempt at once. The store stays real (the tests' throwaway redis-server), so every transition
still goes through the compare-and-set script.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ajet_runner.statemachine.blueprint.parse import parse_blueprint
from ajet_runner.statemachine.lifecycle import Lifecycle
from ajet_runner.store.records import Context
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from ajet_runner.workers.executors.stub import SIGINT_EXIT, Script, Started, StubExecutor

# The stub executor is part of the product now (workers/executors/stub.py); the tests' old name stays.
InMemoryRunner = StubExecutor
__all__ = ["SIGINT_EXIT", "InMemoryRunner", "Script", "Started", "StubExecutor"]


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
    store.records.create(exp_id, {
        "state": state, "lifecycle": lc.to_dict(), "purpose": bp.exp_purpose, "result_dir": bp.exp_result_dir,
        "blueprint_json": bp.stored(), "attempt": attempt, "gpus_needed": 1, "queue": "default",
        "ctx": (ctx or Context()).to_json(), **fields,
    }, {"message": "seeded by a test"})
