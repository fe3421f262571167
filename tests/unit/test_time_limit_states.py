"""The time limit ends the experiment in every state that can wait (`launching`, `failing`, `repairing`),
not only while it runs: `timed_out`, the report written, on time (issue 36 item 4)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ajet_runner.store.records import Context, ExperimentRecord, PendingRepair
from ajet_runner.store.store import Store
from ajet_runner.workers.drive.driver import ExperimentDriver
from ajet_runner.workers.identity.this_node import NodeInfo
from tests.doubles import LAUNCH, InMemoryRunner, Script, seed, settings_for

NODE = NodeInfo(name="test-node", gpus=0, slots=1)
BUSY = "RuntimeError: GPU memory check failed: all GPUs must have >= 95% free. Violations: GPU 0 (H100)"


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


def drive(store: Store, exp_id: str, runner: InMemoryRunner, **settings: Any) -> tuple[str, ExperimentRecord]:
    kw = store.r.connection_pool.connection_kwargs
    url = f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"
    outcome = ExperimentDriver(store, exp_id, settings_for(url, **settings), NODE, "test/1", runner=runner).run()
    rec = store.records.get(exp_id)
    assert rec is not None
    return outcome, rec


def flag(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "results" / "finish.flag").read_text())


def test_a_transient_backoff_in_repairing_ends_timed_out_at_the_limit(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no nvidia-smi: gpu_busy can only be waited out
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path, max_time="3 seconds")
    runner = InMemoryRunner(Script(["starting", "Traceback (most recent call last):", BUSY], exit_code=1))
    began = time.monotonic()
    outcome, rec = drive(store, exp_id, runner)  # the catalogue's first backoff is 60 s
    took = time.monotonic() - began
    assert outcome == "timed_out" and len(runner.started) == 1
    assert took < 40, f"the 60 s backoff was waited out past the 3 s limit ({took:.0f} s)"
    assert rec.finished_at is not None and rec.started_at is not None
    assert rec.finished_at - rec.started_at >= 3.0  # not before the limit either
    [repair] = rec.ctx.repairs
    assert any("the experiment's time limit was reached" in c for c in repair.changes), repair.changes
    assert repair.next.startswith("no relaunch: max time of 3s reached"), repair.next
    history = rec.lifecycle["history"]
    assert [h["trigger"] for h in history][-2:] == ["time_up", "collected"]
    assert history[-2]["from"] == "repairing"
    assert flag(tmp_path)["outcome"] == "timed_out"
    log = (tmp_path / "results" / "repair_log.md").read_text()
    assert "no relaunch: max time of 3s reached" in log
    # The wait was cut short: no relaunch happened, and nothing may say one did.
    assert repair.result == "not relaunched" and not repair.relaunched
    assert "- **Result:** not relaunched" in log and "unchanged after a wait" not in log
    assert "would have repeated" not in log
    report = (tmp_path / "results" / "experiment_report.md").read_text()
    assert "| relaunched |" not in report and "0 relaunched after a repair" in report


def test_a_failure_past_the_limit_ends_timed_out_without_a_repair(store: Store, tmp_path: Path) -> None:
    exp_id = uuid.uuid4().hex[:12]
    ctx = Context(command=LAUNCH, config_path=str(tmp_path / "code" / "conf.yaml"),
                  pending_repair=PendingRepair(reason="the command exited with code 1", log_tail=["boom"]))
    seed(store, exp_id, tmp_path, state="failing", attempt=1, ctx=ctx, max_time="2 seconds",
         started_at=time.time() - 5)
    runner = InMemoryRunner()
    outcome, rec = drive(store, exp_id, runner)
    assert outcome == "timed_out" and runner.started == []
    [repair] = rec.ctx.repairs
    assert repair.next == "no repair: max time of 2s reached before a repair was decided"
    assert rec.lifecycle["history"][-2]["from"] == "failing"


def test_a_relaunch_past_the_limit_never_starts(store: Store, tmp_path: Path) -> None:
    exp_id = uuid.uuid4().hex[:12]
    ctx = Context(command=LAUNCH, config_path=str(tmp_path / "code" / "conf.yaml"))
    seed(store, exp_id, tmp_path, state="launching", attempt=2, ctx=ctx, max_time="2 seconds",
         started_at=time.time() - 5)
    runner = InMemoryRunner()
    outcome, rec = drive(store, exp_id, runner)
    assert outcome == "timed_out" and runner.started == []
    assert rec.reason == "max time of 2s reached before the launch"
    assert flag(tmp_path)["outcome"] == "timed_out"
