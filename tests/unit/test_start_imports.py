"""What a process loads before it does its job (issue 39): the stage report (`compare --stage`, the outbox) does
not load the experiment report's data model and the store's records through the `workers.report` package; the
node's watcher, which every adoption after a crash waits for, does not load httpx and its command line client
(click, rich, pygments) through the repair adviser."""

from __future__ import annotations

import json
import subprocess
import sys


def _loaded(code: str, names: tuple[str, ...]) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps([n for n in {list(names)!r} if n in sys.modules]))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_stage_report_does_not_load_the_experiment_report_or_the_store() -> None:
    assert _loaded("import ajet_runner.workers.report.stage_report",
                   ("ajet_runner.workers.report.data", "ajet_runner.store.records", "ajet_runner.store.store")) == []


def test_the_watcher_and_the_driver_load_no_http_client() -> None:
    code = ("import importlib\nimport ajet_runner.workers.node.watcher\n"
            "from ajet_runner.store.per_experiment.queue import DRIVE_JOB\n"
            "importlib.import_module(DRIVE_JOB.rpartition('.')[0])")
    assert _loaded(code, ("httpx", "click", "rich", "pygments")) == []
