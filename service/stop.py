"""Stopping and deleting experiments, shared by the HTTP API (and anything else that steers runs).

A queued experiment is taken out of its RQ queue and finished as cancelled right away, by the
real driver in a child process (`python -m ajet_runner.workers.drive.cancel_queued`; the API never imports
`workers/`): it
sees the cancel flag in `queued`, claims the record with a compare-and-set, writes the report and
`finish.flag`. If a worker claimed it first, the claim fails and the
worker, which honours the cancel flag in every state, finishes it instead. A running
experiment only gets the flag: its driver stops it gracefully and collects it.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from pydantic import SecretStr

from ajet_runner.statemachine.lifecycle import State
from ajet_runner.store.records import ExperimentRecord
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import Store

log = logging.getLogger(__name__)
FINISH_TIMEOUT_SECONDS = 120.0


class ExperimentNotFound(LookupError):
    """No experiment with that id (never submitted, or deleted)."""


class AlreadyFinished(RuntimeError):
    """Stop of an experiment that is already finished."""

    def __init__(self, record: ExperimentRecord) -> None:
        self.record = record
        super().__init__(f"experiment {record.id} is already finished ({record.outcome or 'no outcome'})")


class StopFailed(RuntimeError):
    """The inline finish of a queued experiment failed (e.g. its result dir is not writable here)."""


@dataclass
class StopResult:
    id: str
    record: dict[str, Any] | None  # None once deleted
    finished: bool  # the experiment is finished now (a queued one, finished inline)
    deleted: bool


def _flag(store: Store, exp_id: str, delete: bool) -> ExperimentRecord:
    """Set cancel (and delete) flags on an existing record only: never resurrect a deleted hash."""
    if not store.runs.request_stop(exp_id, delete=delete):
        raise ExperimentNotFound(exp_id)
    rec = store.records.get(exp_id)
    if rec is None:
        raise ExperimentNotFound(exp_id)
    return rec


def _dequeue(store: Store, rec: ExperimentRecord) -> bool:
    """Take the record's RQ job out of its queue; True if it was still waiting there."""
    return store.jobs.remove_queued(rec.job_id, rec.queue)


def _writable_here(result_dir: str) -> bool:
    """Whether this process can write the report and finish.flag (the dir, or the parent that will hold it)."""
    if not result_dir:
        return False
    path = os.path.abspath(result_dir)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return os.path.isdir(path) and os.access(path, os.W_OK | os.X_OK)


def _settings_json(settings: Settings) -> str:
    """Every setting, secrets included: the child must act exactly as this process would."""
    data = {k: v.get_secret_value() if isinstance(v, SecretStr) else v for k, v in settings}
    return json.dumps(data, default=str)


def _finish_inline(store: Store, exp_id: str, settings: Settings, rec: ExperimentRecord) -> None:
    """Run the worker's cancel-finish in a child process (`python -m ajet_runner.workers.drive.cancel_queued`): the
    API never loads the driver. Raises StopFailed when the child could not write the result dir (or failed
    otherwise)."""
    cmd = [sys.executable, "-m", "ajet_runner.workers.drive.cancel_queued", exp_id,
           rec.target_node or "api"]
    try:
        done = subprocess.run(cmd, input=_settings_json(settings), capture_output=True, text=True,
                              timeout=FINISH_TIMEOUT_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StopFailed(f"could not finish {exp_id} as cancelled here: {exc}") from exc
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise StopFailed(lines[-1] if lines else f"could not finish {exp_id} as cancelled (exit {done.returncode})")


def stop_experiment(store: Store, exp_id: str, settings: Settings, delete: bool = False) -> StopResult:
    """Stop (and with `delete`, drop) one experiment. Raises ExperimentNotFound, AlreadyFinished, StopFailed.

    Never touches result files: a deleted experiment keeps its result dir and `finish.flag`.
    """
    rec = store.records.get(exp_id)
    if rec is None:
        raise ExperimentNotFound(exp_id)
    if rec.finished:
        if not delete:
            raise AlreadyFinished(rec)
        store.records.delete(exp_id)
        return StopResult(exp_id, None, finished=True, deleted=True)
    rec = _flag(store, exp_id, delete)
    if rec.state == State.queued.value and _writable_here(rec.result_dir):
        _dequeue(store, rec)
        _finish_inline(store, exp_id, settings, rec)
    # Else (the result dir is on another host's disk): the job stays queued and the first worker that
    # takes it sees the cancel flag before anything else and finishes it as cancelled, never launched.
    view = store.records.raw(exp_id)  # the record whole, as the API shows it
    if view is None:
        return StopResult(exp_id, None, finished=True, deleted=True)
    finished = view.get("state") == State.finished.value
    if finished and delete:
        # The driver finished it before it could see delete_requested: drop it ourselves.
        store.records.delete(exp_id)
        return StopResult(exp_id, None, finished=True, deleted=True)
    return StopResult(exp_id, view, finished=finished, deleted=False)
