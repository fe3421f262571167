"""What a process loads before it does its job (issue 39): the stage report (`compare --stage`, the outbox) does
not load the experiment report's data model and the store's records through the `workers.report` package; the
node's watcher, which every adoption after a crash waits for, does not load httpx and its command line client
(click, rich, pygments) through the repair adviser; `ajet-runner worker` spawns its watcher before it loads the
store, rq, the failure catalogue or rich (each import here is one the command makes before `spawn_watcher`), and
`ajet-runner run` starts its local worker before it loads the store and the submission's parser."""

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


# What `ajet-runner worker` must not have loaded when it spawns its watcher: the watcher's start-up (the driver's
# imports) is what adopting a crashed node's runs waits for, and it starts only then. Loaded after the spawn: the
# Store for the first heartbeat, the start checks (the failure catalogue), the supervisor.
HEAVY_BEFORE_THE_WATCHER = (
    "ajet_runner.store.store", "ajet_runner.store.records", "ajet_runner.store.events",
    "ajet_runner.statemachine.failures.signatures", "ajet_runner.cli.commands.start_checks",
    "ajet_runner.workers.node.supervisor", "ajet_runner.workers.drive.driver", "rq", "rich", "yaml", "httpx",
    "fastapi", "matplotlib")


def test_the_worker_command_spawns_its_watcher_before_loading_the_store_or_the_catalogue() -> None:
    code = ("import ajet_runner.cli.app\n"
            "from ajet_runner.cli.lazy import build_module\n"
            "build_module('worker_command')\n"  # the `worker` command, built as the CLI resolves it
            "from ajet_runner.logsetup import LogSetupError, configure\n"  # the body's imports before the spawn
            "from ajet_runner.workers.identity.this_node import NodeInfo\n"
            "from ajet_runner.workers.node.watcher_process import spawn_watcher\n"
            "from ajet_runner.workers.executors import names")
    assert _loaded(code, HEAVY_BEFORE_THE_WATCHER) == []


def test_the_command_line_alone_loads_no_settings_store_or_http() -> None:
    assert _loaded("import ajet_runner.cli.app", ("pydantic", "redis", "ajet_runner.store.settings", "httpx", "rich",
                                                  "yaml", "fastapi")) == []


def test_run_starts_its_local_worker_before_loading_the_store_or_the_submission() -> None:
    code = ("import ajet_runner.cli.app\n"
            "from ajet_runner.cli.lazy import build_module\n"
            "build_module('run_command')\n"  # `run` and `demo`, built as the CLI resolves them
            "from ajet_runner.cli.commands.worker_command import export_executor_options\n"  # the body's imports
            "from ajet_runner.logsetup import configure\n"  # before start_local_worker
            "from ajet_runner.service.embedded import EmbeddedRedis")
    assert _loaded(code, ("ajet_runner.store.store", "ajet_runner.store.records", "ajet_runner.service.submit",
                          "ajet_runner.statemachine.blueprint.parse", "ajet_runner.cli.commands.follow", "rq",
                          "fastapi", "matplotlib")) == []


def test_a_started_worker_loads_no_http_client_or_console() -> None:
    """Everything `ajet-runner worker` imports to run (its checks, the supervisor, the outbox's deliverer): httpx
    (with rich, click and pygments) is loaded by a webhook's first delivery, not by each of the ~190 worker starts
    of a test run (~0.1 CPU-s each)."""
    code = ("import ajet_runner.cli.app\n"
            "from ajet_runner.cli.lazy import build_module\n"
            "build_module('worker_command')\n"
            "from ajet_runner.cli.commands.start_checks import check_adviser, install_site_catalogue\n"
            "import ajet_runner.workers.node.supervisor, ajet_runner.workers.notify.deliverer")
    assert _loaded(code, ("httpx", "anyio", "rich", "click", "pygments")) == []
