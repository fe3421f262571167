"""Allowed roots are enforced where files are written (issue 18, defect 4), not once at submission.

The repro: a blueprint accepted inside the roots, then its result dir swapped for a symlink to a
directory outside them. Neither the API (stopping the queued run finishes it inline) nor a worker
(preflight, report, finish.flag) may write there; both refuse and record why. Swapped while the
command runs (the result dir or its logs/ dir), the wrapper's log and rc file are not written
through the symlink either: the run ends failed naming the roots.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ajet_runner.resultdir.flag import atomic_write_text
from ajet_runner.resultdir.roots import OutsideRoots, confined, parse_roots
from ajet_runner.service.api.application import create_app
from ajet_runner.service.submit import SubmissionRejected, submit
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store
from tests.integration.scenario import make, wait_for
from tests.integration.workers import running_worker, worker_env

pytestmark = [pytest.mark.integration]

TOKEN = "t-roots-0123456789"
VENV = os.path.dirname(os.path.dirname(os.path.abspath(sys.executable)))


def _swap_for_symlink(results: Path, outside: Path) -> None:
    if results.is_symlink() or results.is_file():
        results.unlink()
    elif results.exists():
        shutil.rmtree(results)
    outside.mkdir(parents=True, exist_ok=True)
    results.symlink_to(outside, target_is_directory=True)


def _everything_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def test_confined_writes_refuse_a_symlink_out_of_the_roots(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "exp").mkdir(parents=True)
    outside.mkdir()
    with confined(parse_roots(str(root))):
        atomic_write_text(root / "exp" / "a.txt", "fine\n")
        (root / "exp" / "link").symlink_to(outside, target_is_directory=True)
        with pytest.raises(OutsideRoots, match="outside the allowed roots"):
            atomic_write_text(root / "exp" / "link" / "finish.flag", "no\n")
        with pytest.raises(OutsideRoots):
            atomic_write_text(outside / "finish.flag", "no\n")
        # A symlinked final name is replaced, never written through.
        (outside / "target").write_text("keep\n")
        (root / "exp" / "b.txt").symlink_to(outside / "target")
        atomic_write_text(root / "exp" / "b.txt", "new\n")
    assert (outside / "target").read_text() == "keep\n" and not (root / "exp" / "b.txt").is_symlink()
    assert _everything_under(outside) == ["target"]


def test_venv_and_yaml_outside_the_roots_are_refused_at_submission(redis_url: str, tmp_path: Path) -> None:
    sc = make("demo", tmp_path / "in")
    store = Store.from_url(redis_url)
    with pytest.raises(SubmissionRejected) as err:
        submit(store, sc.blueprint.read_text(), allowed_roots=[str(tmp_path)])  # venv is elsewhere
    fields = {p.field for p in err.value.problems}
    assert fields == {"exp_venv_exe"}, err.value.problems
    assert store.indexes.count() == 0


def test_api_stop_of_a_queued_run_never_writes_through_a_swapped_result_dir(redis_url: str, tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    sc = make("demo", root)
    settings = Settings(redis_url=redis_url, token=TOKEN, allowed_roots=f"{root}:{VENV}")
    with TestClient(create_app(settings)) as api:
        hdr = {"Authorization": f"Bearer {TOKEN}"}
        resp = api.post("/v1/experiments", json={"blueprint": sc.blueprint.read_text()}, headers=hdr)
        assert resp.status_code == 201, resp.text
        exp_id = resp.json()["id"]
        _swap_for_symlink(sc.results, outside)
        stop = api.post(f"/v1/experiments/{exp_id}/stop", headers=hdr)
        assert stop.status_code == 200, stop.text
        rec = stop.json()
    assert _everything_under(outside) == []  # nothing written outside the roots
    assert rec["state"] == "finished" and rec["outcome"] == "failed"
    assert "outside the allowed roots" in rec["reason"] and str(outside) in rec["reason"]
    events = Store.from_url(redis_url).events.read(exp_id)
    assert any(e.get("type") == "result_write_failed" and e.get("errno") == "EACCES" for e in events)
    assert Store.from_url(redis_url).counters.read()["result_write_failures"] == {"EACCES": 1.0}


@pytest.mark.slow
def test_a_worker_refuses_to_launch_or_write_through_a_swapped_result_dir(
        redis_url: str, tmux_socket: str, tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    sc = make("demo", root)
    store = Store.from_url(redis_url)
    roots = f"{root}:{VENV}"
    exp_id = submit(store, sc.blueprint.read_text(), allowed_roots=parse_roots(roots))["id"]
    _swap_for_symlink(sc.results, outside)  # after submission, before any worker took it
    with running_worker(worker_env(redis_url, tmux_socket, AJET_RUNNER_ALLOWED_ROOTS=roots), "n1", "--gpus", "0"):
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 60, "the refusal")
    rec = store.records.raw(exp_id)
    assert rec is not None and rec["outcome"] == "failed", rec
    assert "exp_result_dir" in rec["reason"] or "outside the allowed roots" in rec["reason"], rec["reason"]
    history = [h["trigger"] for h in rec["lifecycle"]["history"]]
    assert "launched" not in history and history[-1] == "write_failed", history
    assert _everything_under(outside) == []


def _swap_mid_run(redis_url: str, tmux_socket: str, tmp_path: Path, swap: str,
                  command: str | None) -> tuple[dict, Path]:
    """Start a run inside the roots; while its command runs, move `swap` (the result dir or its
    logs/ dir) aside, still inside the roots, and put a symlink to a dir outside the roots in its place."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    sc = make("demo", root)
    text = sc.blueprint.read_text()
    if command is not None:  # a command that writes nothing itself: every write would be the runner's
        text = re.sub(r"```bash\n.*?```", f"```bash\n{command}\n```", text, count=1, flags=re.S)
    store = Store.from_url(redis_url)
    roots = f"{root}:{VENV}"
    exp_id = submit(store, text, allowed_roots=parse_roots(roots))["id"]
    target = sc.results / "logs" if swap == "logs" else sc.results
    with running_worker(worker_env(redis_url, tmux_socket, AJET_RUNNER_ALLOWED_ROOTS=roots), "n1", "--gpus", "0"):
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "running", 60, "the run to start")
        wait_for(lambda: (target / "attempt-1.log").exists() if swap == "logs" else (target / "logs").exists(),
                 10, "the wrapper's files")
        target.rename(target.with_name(target.name + ".moved"))
        outside.mkdir()
        target.symlink_to(outside, target_is_directory=True)
        wait_for(lambda: (store.records.raw(exp_id) or {}).get("state") == "finished", 120, "the run to finish")
    rec = store.records.raw(exp_id)
    assert rec is not None
    return rec, outside


@pytest.mark.slow
def test_logs_dir_swapped_for_a_symlink_mid_run_is_never_written_through(
        redis_url: str, tmux_socket: str, tmp_path: Path) -> None:
    rec, outside = _swap_mid_run(redis_url, tmux_socket, tmp_path, "logs", None)
    assert _everything_under(outside) == []  # no rc, no log, nothing from the runner or its wrapper
    moved = tmp_path / "root" / "demo" / "results" / "logs.moved"
    assert (moved / "attempt-1.log").stat().st_size > 0  # the log went on into the file opened at start
    assert not (moved / "attempt-1.rc").exists()  # not written once its dir had moved
    assert rec["outcome"] == "failed", rec
    reasons = " | ".join(h.get("reason", "") for h in rec["lifecycle"]["history"])
    assert "outside the allowed roots" in reasons and str(outside) in reasons, reasons
    assert [h["trigger"] for h in rec["lifecycle"]["history"]].count("launched") == 1
    events = Store.from_url(redis_url).events.read(rec["id"])
    assert any(e.get("type") == "result_write_failed" and e.get("errno") == "EACCES" for e in events)


@pytest.mark.slow
def test_result_dir_swapped_for_a_symlink_mid_run_is_never_written_through(
        redis_url: str, tmux_socket: str, tmp_path: Path) -> None:
    rec, outside = _swap_mid_run(redis_url, tmux_socket, tmp_path, "results", "sleep 4\necho finished sleeping")
    assert _everything_under(outside) == []  # no rc, no report, no finish.flag
    moved = tmp_path / "root" / "demo" / "results.moved"
    assert "finished sleeping" in (moved / "logs" / "attempt-1.log").read_text()
    assert not (moved / "logs" / "attempt-1.rc").exists()
    assert rec["outcome"] == "failed", rec
    assert "outside the allowed roots" in rec["reason"] and str(outside) in rec["reason"], rec["reason"]
    events = Store.from_url(redis_url).events.read(rec["id"])
    assert any(e.get("type") == "result_write_failed" and e.get("errno") == "EACCES" for e in events)
