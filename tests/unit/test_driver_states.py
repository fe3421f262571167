"""Every state handler of the driver, and every give-up and budget path, with the in-memory runner.

No tmux and no processes (tests/doubles.py); the store is real (the tests' throwaway redis-server).
"""

from __future__ import annotations

import json
import shlex
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from ajet_runner.store.records import Context, ExperimentRecord, PendingRepair, RepairResult
from ajet_runner.store.store import Store
from ajet_runner.workers.drive.driver import ExperimentDriver
from ajet_runner.workers.drive.seam import Drive
from ajet_runner.workers.executors.local.tmux import TmuxRunner
from ajet_runner.workers.executors.protocol import Runner
from ajet_runner.workers.identity.this_node import NodeInfo
from tests.doubles import InMemoryRunner, Script, seed, settings_for
from tests.load import scaled

NODE = NodeInfo(name="test-node", gpus=0, slots=1)
COMMAND = "python -m ajet.launcher --conf conf.yaml --backbone verl"


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


def new_id() -> str:
    return uuid.uuid4().hex[:12]


def hook(answer: dict[str, Any]) -> str:
    """A repair hook command that answers `answer` (workers/repair/site_hook.py)."""
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(f'print({json.dumps(json.dumps(answer))})')}"


def drive(store: Store, exp_id: str, runner: InMemoryRunner, **settings: Any) -> tuple[str, ExperimentRecord]:
    driver = ExperimentDriver(store, exp_id, settings_for(store_url(store), **settings), NODE, "test/1",
                              runner=runner)  # an InMemoryRunner is a Runner (workers/executors/protocol.py)
    outcome = driver.run()
    rec = store.records.get(exp_id)
    assert rec is not None
    return outcome, rec


def store_url(store: Store) -> str:
    kw = store.r.connection_pool.connection_kwargs
    return f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"


def triggers(rec: ExperimentRecord) -> list[str]:
    return [h["trigger"] for h in rec.lifecycle["history"]]


def flag(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "results" / "finish.flag").read_text())


def failing(store: Store, tmp_path: Path, *, attempts: int = 1) -> str:
    """An experiment whose attempt `attempts` just failed for a reason no catalogue entry knows."""
    exp_id = new_id()
    ctx = Context(command=COMMAND, config_path=str(tmp_path / "code" / "conf.yaml"),
                  pending_repair=PendingRepair(reason="the command exited with code 1", log_tail=["boom"]))
    seed(store, exp_id, tmp_path, state="failing", attempt=attempts, ctx=ctx)
    return exp_id


# -- queued -------------------------------------------------------------------------------------------
def test_queued_with_a_stop_request_finishes_cancelled_and_never_launches(store: Store, tmp_path: Path) -> None:
    exp_id = new_id()
    seed(store, exp_id, tmp_path)
    store.runs.request_cancel(exp_id)
    runner = InMemoryRunner()
    outcome, rec = drive(store, exp_id, runner)
    assert outcome == "cancelled" and rec.finished and runner.started == []
    assert triggers(rec) == ["cancel", "collected"] and flag(tmp_path)["outcome"] == "cancelled"


def test_queued_rejected_by_preflight_gives_up_as_not_repairable(store: Store, tmp_path: Path) -> None:
    exp_id = new_id()
    seed(store, exp_id, tmp_path)
    (tmp_path / "code" / "conf.yaml").unlink()  # the blueprint's YAML is gone by the time a worker takes it
    runner = InMemoryRunner()
    outcome, rec = drive(store, exp_id, runner)
    assert outcome == "failed" and runner.started == []
    assert triggers(rec) == ["reject", "give_up", "collected"]
    assert [r.result for r in rec.ctx.repairs] == [RepairResult.not_repairable]
    assert flag(tmp_path)["outcome"] == "failed"


# -- queued -> launching -> running -> collecting -------------------------------------------------------
def test_a_clean_run_goes_from_queued_to_completed(store: Store, tmp_path: Path) -> None:
    exp_id = new_id()
    seed(store, exp_id, tmp_path)
    runner = InMemoryRunner(Script(["Training Progress: 100%", "done"], exit_code=0))
    outcome, rec = drive(store, exp_id, runner)
    assert outcome == "completed" and triggers(rec) == ["start", "launched", "completed", "collected"]
    [started] = runner.started
    assert "ajet.launcher" in started.command and started.env["AJET_RUNNER_EXPERIMENT"] == exp_id
    assert rec.ctx.attempts[0].exit_code == 0 and rec.ctx.attempts[0].end_reason == "the command exited 0"
    assert flag(tmp_path)["outcome"] == "completed"
    assert (tmp_path / "results" / "experiment_report.md").exists()


def test_running_stops_the_run_when_a_stop_is_requested(store: Store, tmp_path: Path) -> None:
    exp_id = new_id()
    seed(store, exp_id, tmp_path)
    runner = InMemoryRunner(Script(["step 1"], exit_code=None))  # runs until stopped
    result: list[tuple[str, ExperimentRecord]] = []
    thread = threading.Thread(target=lambda: result.append(drive(store, exp_id, runner)), daemon=True)
    thread.start()
    deadline = time.monotonic() + scaled(30)
    while (rec := store.records.get(exp_id)) is not None and rec.state != "running":
        assert time.monotonic() < deadline, "the run never reached running"
        time.sleep(0.01)
    store.runs.request_cancel(exp_id)
    thread.join(30)
    assert result, "the driver did not finish after the stop request"
    outcome, rec = result[0]
    assert outcome == "cancelled" and runner.stopped == [runner.started[0].session]
    assert triggers(rec) == ["start", "launched", "cancel", "collected"]


# -- failing: every give-up path ------------------------------------------------------------------------
def test_failing_before_any_launch_is_not_repairable(store: Store, tmp_path: Path) -> None:
    exp_id = new_id()
    seed(store, exp_id, tmp_path, state="failing", attempt=0, ctx=Context())
    outcome, rec = drive(store, exp_id, InMemoryRunner())
    assert outcome == "failed" and [r.result for r in rec.ctx.repairs] == [RepairResult.not_repairable]


def test_failing_with_no_plan_gives_up_as_not_repairable(store: Store, tmp_path: Path) -> None:
    exp_id = failing(store, tmp_path)
    outcome, rec = drive(store, exp_id, InMemoryRunner(), repair_hook=hook({"actions": []}))
    assert outcome == "failed" and triggers(rec)[-2:] == ["give_up", "collected"]
    assert [r.result for r in rec.ctx.repairs] == [RepairResult.not_repairable]
    assert store.counters.read()["repairs"].get("unknown|not repairable", 0) >= 1


def test_failing_with_a_plan_that_changes_nothing_gives_up(store: Store, tmp_path: Path) -> None:
    exp_id = failing(store, tmp_path)
    absent = "no-such-program-" + uuid.uuid4().hex[:6]
    plan = {"actions": [{"kind": "prefix_command", "value": f"{absent} -q", "requires": absent}]}
    outcome, rec = drive(store, exp_id, InMemoryRunner(), repair_hook=hook(plan))
    assert outcome == "failed" and [r.result for r in rec.ctx.repairs] == [RepairResult.no_applicable_change]


def test_failing_with_the_budget_spent_gives_up(store: Store, tmp_path: Path) -> None:
    exp_id = failing(store, tmp_path)
    plan = {"actions": [{"kind": "set_env", "key": "FIX", "value": "1"}]}
    runner = InMemoryRunner()
    outcome, rec = drive(store, exp_id, runner, repair_hook=hook(plan), repair_budget=0)
    assert outcome == "failed" and runner.started == []
    assert [r.result for r in rec.ctx.repairs] == [RepairResult.budget_spent]
    assert "repair budget spent" in rec.reason


def test_failing_with_a_stop_request_ends_cancelled_without_a_repair(store: Store, tmp_path: Path) -> None:
    """Stop wins: a run that failed while a stop was on its way is cancelled, not repaired or failed."""
    exp_id = failing(store, tmp_path)
    store.runs.request_cancel(exp_id)
    plan = {"actions": [{"kind": "set_env", "key": "FIX", "value": "1"}]}
    runner = InMemoryRunner()
    outcome, rec = drive(store, exp_id, runner, repair_hook=hook(plan))
    assert outcome == "cancelled" and runner.started == []
    assert triggers(rec)[-2:] == ["cancel", "collected"] and "repair" not in triggers(rec)
    (record,) = rec.ctx.repairs
    assert record.result == "" and record.next.startswith("stopped: a stop request arrived before a repair")
    assert flag(tmp_path)["outcome"] == "cancelled"


# -- failing -> repairing -> launching: relaunch until the budget runs out ---------------------------------
def test_repairs_relaunch_with_the_fix_until_the_budget_runs_out(store: Store, tmp_path: Path) -> None:
    exp_id = failing(store, tmp_path)
    # A fix that differs at each attempt (FIX=<attempt>), so every plan changes something.
    code = ("import json, sys; n = json.load(sys.stdin)['attempt']; "
            "print(json.dumps({'actions': [{'kind': 'set_env', 'key': 'FIX', 'value': str(n)}]}))")
    runner = InMemoryRunner(Script(["still broken"], exit_code=1), Script(["still broken"], exit_code=1))
    outcome, rec = drive(store, exp_id, runner, repair_hook=f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}",
                         repair_budget=2, repair_budget_per_signature=2)
    assert outcome == "failed"
    assert [r.result for r in rec.ctx.repairs] == [RepairResult.relaunched, RepairResult.relaunched,
                                                  RepairResult.budget_spent]
    assert [s.env.get("FIX") for s in runner.started] == ["1", "2"]
    assert [a.number for a in rec.ctx.attempts] == [2, 3] and rec.attempt == 3
    assert triggers(rec).count("relaunch") == 2 and rec.ctx.pending_repair is not None  # the last failure, kept
    assert rec.ctx.repairs[0].next.startswith("attempt 2:")


def test_the_same_fix_twice_is_no_applicable_change(store: Store, tmp_path: Path) -> None:
    exp_id = failing(store, tmp_path)
    plan = {"actions": [{"kind": "set_env", "key": "FIX", "value": "1"}]}
    runner = InMemoryRunner(Script(["still broken"], exit_code=1))
    outcome, rec = drive(store, exp_id, runner, repair_hook=hook(plan))
    assert outcome == "failed" and len(runner.started) == 1
    assert [r.result for r in rec.ctx.repairs] == [RepairResult.relaunched, RepairResult.no_applicable_change]


# -- the seam: what handlers may use ----------------------------------------------------------------------
def test_the_tmux_runner_and_the_in_memory_one_are_both_runners(tmp_path: Path) -> None:
    double: Runner = InMemoryRunner()  # mypy checks the double against the protocol here
    assert isinstance(double, Runner)
    assert isinstance(TmuxRunner(str(tmp_path / "no-server.sock")), Runner)  # no tmux server is started
    assert not isinstance(object(), Runner)


# -- running: the observers ------------------------------------------------------------------------------
def test_the_watch_loop_calls_its_observers_and_the_log_tail_reaches_the_record(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ajet_runner.workers.drive.states import running

    seen: list[str] = []

    class Recorder(running.WatchObserver):
        def before_tick(self, d: Drive, tick: running.Tick) -> None:
            seen.append("before")

        def after_tick(self, d: Drive, tick: running.Tick) -> None:
            seen.append(f"after:{tick.watch.bytes_read - tick.read_before}")

        def on_attempt_end(self, d: Drive, tick: running.Tick) -> None:
            seen.append("end")

    defaults = running.observers
    monkeypatch.setattr(running, "observers", lambda: [*defaults(), Recorder()])
    exp_id = new_id()
    seed(store, exp_id, tmp_path)
    outcome, rec = drive(store, exp_id, InMemoryRunner(Script(["hello", "world"], exit_code=0)))
    assert outcome == "completed" and seen[0] == "before" and seen[-2].startswith("after:") and seen[-1] == "end"
    assert seen.count("end") == 1  # once, when the rules ended the attempt
    assert any(s != "after:0" for s in seen if s.startswith("after:"))  # the tick that read the log
    assert store.log_tail.read(exp_id)[-2:] == ["hello", "world"]  # LogTail: appended to the capped list
    assert [type(o).__name__ for o in defaults()] == ["Lease", "Evaluations", "Progress", "LogTail", "WatchMetrics"]
