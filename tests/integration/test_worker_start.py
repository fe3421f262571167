"""`ajet-runner worker` starts its watcher first (the watcher's start-up is what re-adopting a node's runs
waits for, issue 39), then checks its settings: a worker refused for a bad setting leaves no watcher
behind and registers no node."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import psutil
import pytest

from ajet_runner.store.store import Store
from tests.integration.scenario import CLI
from tests.integration.workers import worker_env

pytestmark = pytest.mark.integration


def _watchers(node: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "ajet_runner.workers.node.watcher" in cmd and node in cmd:
            found.append(proc)
    return found


def test_a_worker_refused_for_a_bad_catalogue_leaves_no_watcher_and_no_node(redis_url: str, tmux_socket: str,
                                                                            tmp_path: Path) -> None:
    bad = tmp_path / "catalogue.yaml"
    bad.write_text("signatures: [this is: not a catalogue\n", encoding="utf-8")
    node = f"refused-{uuid.uuid4().hex[:6]}"
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_CATALOGUE_EXTRA=str(bad))
    proc = subprocess.run([*CLI, "worker", "--node", node, "--gpus", "0"], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2 and "AJET_RUNNER_CATALOGUE_EXTRA is not a valid catalogue" in proc.stderr
    _, alive = psutil.wait_procs(_watchers(node), timeout=30)
    assert not alive, f"a watcher outlived its refused worker: {[p.pid for p in alive]}"
    assert node not in {n["name"] for n in Store.from_url(redis_url).nodes.all()}
