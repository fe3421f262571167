"""Repairs through the driver with the in-memory runner (tests/doubles.py): no identical relaunch, the
catalogue's alternatives in order, transient causes with their backoff, a truthful repair log."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from ajet_runner.store.records import Context, ExperimentRecord, RepairResult
from ajet_runner.store.store import Store
from ajet_runner.workers.drive.driver import ExperimentDriver
from ajet_runner.workers.identity.this_node import NodeInfo
from tests.doubles import InMemoryRunner, Script, seed, settings_for
from tests.load import scaled

NODE = NodeInfo(name="test-node", gpus=0, slots=1)
WITH_RAY = "python -m ajet.launcher --conf conf.yaml --backbone verl --with-ray"
RAY_LINE = ("ConnectionError: Ray is trying to start at 10.0.0.12:6379, but is already running at 10.0.0.12:6379. "
            "Please specify a different port using the `--port` flag of `ray start` command.")
NET_LINE = "requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443)"


@pytest.fixture()
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


def drive(store: Store, exp_id: str, runner: InMemoryRunner, **settings: Any) -> tuple[str, ExperimentRecord]:
    kw = store.r.connection_pool.connection_kwargs
    url = f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"
    driver = ExperimentDriver(store, exp_id, settings_for(url, **settings), NODE, "test/1",
                              runner=runner)  # an InMemoryRunner is a Runner (workers/executors/protocol.py)
    outcome = driver.run()
    rec = store.records.get(exp_id)
    assert rec is not None
    return outcome, rec


def failed_with(*lines: str) -> Script:
    return Script(["starting", *lines, "Traceback (most recent call last):", *lines], exit_code=1)


def test_a_stale_ray_head_not_ours_is_reused_instead_of_relaunching_the_same_command(
        store: Store, tmp_path: Path) -> None:
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path, command=WITH_RAY)
    runner = InMemoryRunner(failed_with(RAY_LINE), Script(["Training Progress: 100%"], exit_code=0))
    outcome, rec = drive(store, exp_id, runner)
    assert outcome == "completed"
    assert [("--with-ray" in s.command) for s in runner.started] == [True, False]
    [repair] = rec.ctx.repairs
    assert repair.signature == "ray_already_running" and repair.result is RepairResult.relaunched
    assert repair.changes[0].startswith("remove --with-ray from the launcher")
    assert any("no process of this experiment is running" in s for s in repair.skipped)
    log = (tmp_path / "results" / "repair_log.md").read_text()
    assert "remove --with-ray" in log and "Considered and not done:" in log
    assert "clean up ray before relaunching" not in log  # nothing claimed that was not done


def test_the_same_failure_after_every_alternative_ends_failed_naming_the_identical_attempt(
        store: Store, tmp_path: Path) -> None:
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path, command=WITH_RAY)
    runner = InMemoryRunner(failed_with(RAY_LINE), failed_with(RAY_LINE))
    outcome, rec = drive(store, exp_id, runner, repair_budget=5, repair_budget_per_signature=5)
    assert outcome == "failed" and len(runner.started) == 2  # never a third, equal attempt
    assert [r.result for r in rec.ctx.repairs] == [RepairResult.relaunched, RepairResult.no_applicable_change]
    assert rec.ctx.repairs[-1].identical_to == 2
    assert "attempt 2 already ran exactly this" in rec.reason
    assert rec.ctx.repairs[-1].changes == []  # nothing done, so nothing claimed
    log = (tmp_path / "results" / "repair_log.md").read_text()
    assert "would have repeated attempt 2 exactly" in log


def test_a_transient_cause_is_relaunched_unchanged_once_per_backoff_then_given_up(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # the node's tools, given: no proxychains4 here
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path)
    runner = InMemoryRunner(*(failed_with(NET_LINE) for _ in range(4)))
    outcome, rec = drive(store, exp_id, runner, repair_budget=9, repair_budget_per_signature=9,
                         repair_backoff_scale=0.0)
    assert outcome == "failed"
    # attempt 2: the offline fix (no proxychains4 here); attempts 3 and 4: unchanged after each backoff
    assert [s.env.get("HF_HUB_OFFLINE") for s in runner.started] == [None, "1", "1", "1"]
    assert runner.started[1].command == runner.started[2].command == runner.started[3].command
    results = [(r.result, r.identical_to) for r in rec.ctx.repairs]
    assert results == [(RepairResult.relaunched, None), (RepairResult.relaunched, 2), (RepairResult.relaunched, 2),
                       (RepairResult.no_applicable_change, 2)]
    assert any(c.startswith("waited 0s") for c in rec.ctx.repairs[1].changes)
    assert "attempt 2 already ran exactly this" in rec.reason


def test_a_cleanup_that_found_nothing_is_not_claimed_as_done(store: Store, tmp_path: Path) -> None:
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path)
    # nccl_timeout's plan is two cleanups; nothing of this experiment runs, so neither is done, and the
    # one clean restart it allows (transient) is an unchanged relaunch
    line = "[rank0]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)"
    runner = InMemoryRunner(failed_with(line), Script(["Training Progress: 100%"], exit_code=0))
    outcome, rec = drive(store, exp_id, runner, repair_backoff_scale=0.0)
    assert outcome == "completed" and len(runner.started) == 2
    [repair] = rec.ctx.repairs
    assert repair.identical_to == 1 and not any("clean up" in c for c in repair.changes)
    assert sum("nothing of its own to stop" in s for s in repair.skipped) == 2


def test_a_stop_during_a_transient_wait_ends_the_run_cancelled_at_once(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading
    import time

    (tmp_path / "empty-bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no nvidia-smi: not confinable, only waited for
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path)
    busy = "RuntimeError: GPU memory check failed: all GPUs must have >= 95% free. Violations: GPU 0 (H100)"
    runner = InMemoryRunner(failed_with(busy))
    result: list[tuple[str, ExperimentRecord]] = []
    thread = threading.Thread(target=lambda: result.append(drive(store, exp_id, runner)), daemon=True)
    thread.start()
    deadline = time.monotonic() + scaled(30)
    while (rec := store.records.get(exp_id)) is None or rec.state != "repairing":
        assert time.monotonic() < deadline, "the run never started its wait"
        time.sleep(0.02)
    asked = time.monotonic()
    store.runs.request_cancel(exp_id)
    thread.join(30)
    assert result and time.monotonic() - asked < 5  # the 60 s backoff was not waited out
    outcome, rec = result[0]
    assert outcome == "cancelled" and len(runner.started) == 1
    [repair] = rec.ctx.repairs
    assert repair.identical_to == 1 and any("a stop was requested" in c for c in repair.changes)
    assert any("not confined: nvidia-smi is not installed" in s for s in repair.skipped)


DOWNLOAD_THEN_LAUNCH = "python scripts/download.py --model q && python -m ajet.launcher --conf conf.yaml"
DOWNLOAD_FAILED = ["Traceback (most recent call last):", '  File "/code/scripts/download.py", line 3, in <module>',
                   '  File "/venv/lib/python3.11/site-packages/requests/api.py", line 73, in get', NET_LINE]


def node_bin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *tools: str) -> None:
    """The node's PATH for the runner's own look-ups, holding exactly `tools` (stand-ins that run their args)."""
    bin_dir = tmp_path / "node-bin"
    bin_dir.mkdir()
    for tool in tools:
        (bin_dir / tool).write_text('#!/bin/sh\nshift; exec "$@"\n')
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_a_network_failure_in_a_download_step_puts_proxychains_on_that_line_after_the_backoff(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node_bin(tmp_path, monkeypatch, "proxychains4")
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path, command=DOWNLOAD_THEN_LAUNCH)
    runner = InMemoryRunner(Script(["downloading", *DOWNLOAD_FAILED], exit_code=1),
                            Script(["Training Progress: 100%"], exit_code=0))
    outcome, rec = drive(store, exp_id, runner, repair_backoff_scale=0.05)  # the catalogue's 60 s → 3 s
    assert outcome == "completed"
    first_command = runner.started[0].command  # the preflight pointed --conf at its YAML copy
    assert first_command.startswith("python scripts/download.py --model q && python -m ajet.launcher --conf ")
    assert runner.started[1].command == "proxychains4 -q " + first_command
    [repair] = rec.ctx.repairs
    assert repair.backoff_seconds == pytest.approx(3.0)
    assert repair.changes[0].startswith("run `python scripts/download.py --model` behind `proxychains4 -q` "
                                        "(the command whose output holds the failure: the traceback starts in "
                                        "/code/scripts/download.py)"), repair.changes
    assert any(c.startswith("waited 3s") and c.endswith("relaunching with the fix") for c in repair.changes)
    first, second = rec.ctx.attempts
    assert first.ended_at is not None and second.started_at - first.ended_at >= 3.0  # the backoff was waited
    assert "after 3s" in next(h["reason"] for h in rec.lifecycle["history"] if h["trigger"] == "repair")


def test_a_network_failure_of_the_launcher_prefixes_the_launcher_not_the_download(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node_bin(tmp_path, monkeypatch, "proxychains4")
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path, command=DOWNLOAD_THEN_LAUNCH)
    launcher_failed = ["Traceback (most recent call last):",
                       '  File "/venv/lib/python3.11/site-packages/ajet/launcher.py", line 9, in <module>', NET_LINE]
    runner = InMemoryRunner(Script(["ok", *launcher_failed], exit_code=1), Script(["done"], exit_code=0))
    outcome, _ = drive(store, exp_id, runner, repair_backoff_scale=0.0)
    assert outcome == "completed"
    assert runner.started[1].command == runner.started[0].command.replace(
        "&& python -m ajet.launcher", "&& proxychains4 -q python -m ajet.launcher")
    assert runner.started[1].command != runner.started[0].command


def test_without_proxychains_on_the_node_the_report_says_so_and_no_identical_relaunch_follows(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node_bin(tmp_path, monkeypatch)  # no proxychains4
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path, command=DOWNLOAD_THEN_LAUNCH)
    runner = InMemoryRunner(Script(DOWNLOAD_FAILED, exit_code=1), Script(DOWNLOAD_FAILED, exit_code=1))
    outcome, rec = drive(store, exp_id, runner, repair_backoff_scale=0.0)
    assert outcome == "failed"
    assert [s.env.get("HF_HUB_OFFLINE") for s in runner.started] == [None, "1"]  # the other fix, not the same run
    assert runner.started[0].command == runner.started[1].command  # never behind a proxychains that is not there
    missing = ("proxychains4 is not installed on this node, so `python scripts/download.py --model` cannot run "
               "behind it")
    assert any(missing in s for s in rec.ctx.repairs[0].skipped)
    report = (tmp_path / "results" / "experiment_report.md").read_text()
    assert missing in report  # a clear line in the report itself, not only in repair_log.md


FAKES = Path(__file__).resolve().parent.parent / "fakes" / "bin"
BUSY_1 = ("RuntimeError: GPU memory check failed: all GPUs must have >= 95% free. "
          "Violations: GPU 1 (NVIDIA H100 80GB HBM3): 51.0% free")


def gpu_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str) -> Path:
    """The node's PATH for the runner's look-ups: the fake nvidia-smi (GPUs from a file) and the python3 it
    runs on, nothing else from the host."""
    bin_dir = tmp_path / "gpu-bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(FAKES / "nvidia-smi")
    (bin_dir / "python3").symlink_to(sys.executable)
    gpus = tmp_path / "gpus"
    gpus.write_text(spec)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setenv("AJET_FAKE_GPUS_FILE", str(gpus))
    return gpus


def agentjet_001(tmp_path: Path) -> None:
    """The codebase's launcher as agentjet 0.0.1 ships it: no --skip-check-avail-gpu."""
    (tmp_path / "code" / "ajet").mkdir(parents=True, exist_ok=True)
    (tmp_path / "code" / "ajet" / "launcher.py").write_text("parser.add_argument('--autokill')\n")


def test_a_busy_second_gpu_is_waited_for_named_and_the_end_says_what_to_do(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The run is on GPU 0 (CUDA_VISIBLE_DEVICES), GPU 1 is someone else's; the 0.0.1 launcher checks both.
    gpu_node(tmp_path, monkeypatch, "81559:0,81559:40000")
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path, ctx=Context(gpus=[0]))
    agentjet_001(tmp_path)
    runner = InMemoryRunner(*(failed_with(BUSY_1) for _ in range(3)))
    outcome, rec = drive(store, exp_id, runner, repair_backoff_scale=0.02,  # 60 s, 300 s → 1.2 s, 6 s
                         repair_budget=5, repair_budget_per_signature=5)
    assert outcome == "failed" and len(runner.started) == 3
    assert runner.started[0].env["CUDA_VISIBLE_DEVICES"] == "0"
    first, second, last = rec.ctx.repairs
    for repair, waited in ((first, "1s"), (second, "6s")):
        line = next(c for c in repair.changes if c.startswith("waited"))
        assert line.startswith(f"waited {waited} (the catalogue's backoff") and "still busy: GPU 1" in line, line
    assert last.identical_to == 1
    assert "busy now: GPU 1" in rec.reason and "What to do: free the busy GPU(s)" in rec.reason, rec.reason
    one, two, three = rec.ctx.attempts
    assert one.ended_at is not None and two.ended_at is not None
    assert two.started_at - one.ended_at >= 1.2 and three.started_at - two.ended_at >= 6.0  # both waits waited


def test_a_busy_second_gpu_freed_during_the_wait_ends_it_early(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    gpus = gpu_node(tmp_path, monkeypatch, "81559:0,81559:40000")
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path)
    agentjet_001(tmp_path)
    runner = InMemoryRunner(failed_with(BUSY_1), Script(["Training Progress: 100%"], exit_code=0))
    freed = threading.Timer(2.0, lambda: gpus.write_text("81559:0,81559:0"))
    freed.start()
    try:
        outcome, rec = drive(store, exp_id, runner)  # the full 60 s backoff: only the freed GPU ends it early
    finally:
        freed.cancel()
    assert outcome == "completed" and len(runner.started) == 2
    line = next(c for c in rec.ctx.repairs[0].changes if c.startswith("waited"))
    assert "every GPU is at least 95 % free now" in line and "relaunching unchanged" in line, line
    first, second = rec.ctx.attempts
    assert first.ended_at is not None and 1.5 <= second.started_at - first.ended_at < 40
