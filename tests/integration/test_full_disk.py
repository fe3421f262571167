"""A full result disk (issue 18, defect 7): never "completed" without a finish.flag, no temp files left.

A real small filesystem (a 2 MiB tmpfs, mounted as root; skipped where mounting is not permitted)
holds the result dir. The test fills it while the run is going:
- without a reserve, the final files cannot be written: the outcome is `failed`, its reason names
  ENOSPC and the path, an event and the `result_write_failures` counter record it;
- with the reserve taken at launch (the default), releasing it at collecting leaves room for the
  report and `finish.flag`;
- the disk is already full when the command ends, so the wrapper's rc write fails: it frees the
  reserve and records the code with the error; the run ends failed naming ENOSPC and the rc file.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from ajet_runner.service.submit import submit
from ajet_runner.store.store import Store
from ajet_runner.workers.report.reserve import RESERVE_NAME
from tests.integration.scenario import make, wait_for
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mount is not permitted here: {done.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, check=False)


def _fill(disk: Path) -> int:
    """Write until the filesystem says ENOSPC; returns the bytes written."""
    written = 0
    with open(disk / "filler", "ab", buffering=0) as fh:
        chunk = b"x" * 65536
        while True:
            try:
                written += fh.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        for size in (4096, 512, 1):  # the last partial blocks too
            while True:
                try:
                    written += fh.write(b"x" * size)
                except OSError:
                    break
    return written


def _temp_files(results: Path) -> list[str]:
    return [str(p) for p in results.rglob("*") if ".tmp." in p.name or p.name.startswith(".ajet-tmp-")]


def _run_filling_the_disk(tmp_path: Path, disk: Path, redis_url: str, tmux_socket: str,
                          reserve: str) -> tuple[dict, Path, Store]:
    sc = make("demo", tmp_path / "exp")
    yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("total_training_steps: 10", "total_training_steps: 6"))
    results = disk / "results"
    text = sc.blueprint.read_text().replace(str(sc.results), str(results))
    store = Store.from_url(redis_url)
    env = worker_env(redis_url, tmux_socket, AJET_RUNNER_RESULT_RESERVE_BYTES=reserve)
    with running_worker(env, "n1", "--gpus", "0"):
        wait_for(lambda: store.nodes.all(), 30, "the worker to register")
        exp_id = submit(store, text)["id"]
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "running", 60, "the run to start")
        assert _fill(disk) > 0
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
    rec = store.records.raw(exp_id)
    assert rec is not None
    return rec, results, store


def test_full_disk_without_reserve_ends_failed_naming_enospc(
        small_disk: Path, tmp_path: Path, redis_url: str, tmux_socket: str) -> None:
    rec, results, store = _run_filling_the_disk(tmp_path, small_disk, redis_url, tmux_socket, "0")
    flag = results / "finish.flag"
    assert rec["outcome"] == "failed", rec
    assert "ENOSPC" in rec["reason"] and str(results) in rec["reason"], rec["reason"]
    if flag.exists():  # written only if the flag itself found room
        assert json.loads(flag.read_text())["outcome"] == "failed"
    assert _temp_files(results) == []
    events = store.events.read(rec["id"])
    assert any(e.get("type") == "result_write_failed" and e.get("errno") == "ENOSPC" for e in events)
    assert store.counters.read()["result_write_failures"] == {"ENOSPC": 1.0}  # one run, counted once
    # The command ended on the full disk: no reserve to free, so no rc file; the full filesystem is
    # the named cause (not "ended without recording an exit code"), and it is not relaunched.
    rc_file = results / "logs" / "attempt-1.rc"
    assert not rc_file.exists()
    reasons = [h.get("reason", "") for h in rec["lifecycle"]["history"]]
    assert any("ENOSPC" in r and str(rc_file) in r for r in reasons), reasons
    assert not any("without recording" in r for r in reasons), reasons
    assert [h["trigger"] for h in rec["lifecycle"]["history"]].count("launched") == 1


def test_full_disk_with_the_reserve_still_gets_report_and_flag(
        small_disk: Path, tmp_path: Path, redis_url: str, tmux_socket: str) -> None:
    rec, results, store = _run_filling_the_disk(tmp_path, small_disk, redis_url, tmux_socket, str(512 * 1024))
    flag = results / "finish.flag"
    assert flag.exists(), rec
    assert json.loads(flag.read_text())["outcome"] == rec["outcome"]
    assert (results / "experiment_report.md").exists() and (results / "results.json").exists()
    assert not (results / RESERVE_NAME).exists()
    assert _temp_files(results) == []


def test_disk_full_when_the_command_ends_fails_naming_enospc_and_the_rc_file(
        small_disk: Path, tmp_path: Path, redis_url: str, tmux_socket: str) -> None:
    """The repro: the disk is already full when the job exits, so the wrapper's rc write fails. The
    wrapper frees the reserve, records the code with the error; the run ends failed naming ENOSPC and
    the rc file, with its report and finish.flag (never "ended without recording an exit code")."""
    rec, results, store = _run_filling_the_disk(tmp_path, small_disk, redis_url, tmux_socket, str(512 * 1024))
    rc_file = results / "logs" / "attempt-1.rc"
    assert "record-error: No space left on device" in rc_file.read_text(), rc_file.read_text()
    assert rec["outcome"] == "failed", rec
    assert "ENOSPC" in rec["reason"] and str(rc_file) in rec["reason"], rec["reason"]
    assert "without recording" not in rec["reason"]
    flag = results / "finish.flag"
    assert flag.exists() and json.loads(flag.read_text())["outcome"] == "failed"
    assert (results / "experiment_report.md").exists()
    assert not (results / RESERVE_NAME).exists()
    assert _temp_files(results) == []
    history = [h["trigger"] for h in rec["lifecycle"]["history"]]
    assert history.count("launched") == 1 and "repair" not in history, history  # not relaunched onto a full disk
    events = store.events.read(rec["id"])
    assert any(e.get("type") == "result_write_failed" and e.get("errno") == "ENOSPC"
               and e.get("path") == str(rc_file) for e in events)
    assert store.counters.read()["result_write_failures"] == {"ENOSPC": 1.0}

