"""The member side of a multi-node run: one RQ job per non-head rank, on that rank's node.

The head's driver writes what it wants into the gang record (launch attempt N, or stop, or
done); this job makes its node's rank follow: it starts the rank's command in its own tmux
session (before the head starts: the head waits until every rank reports "running"), reports
an early exit, stops the command when asked, and ends when the experiment is done. It holds a
per-rank lease; when it dies, the node's supervisor enqueues a new one, which re-adopts the
rank's running session (never starts it twice for one attempt). When its process is stopping (a
worker restart) or it fails, it hands the rank back at once, so that the new one does not wait
for the lease to run out; the command runs on in tmux meanwhile.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any

from ajet_runner.statemachine.models import Blueprint
from ajet_runner.store.cluster.gangs import Gang, GangStore
from ajet_runner.store.records import ExperimentRecord
from ajet_runner.store.settings import Settings
from ajet_runner.store.store import REDIS_DOWN as REDIS_ERRORS
from ajet_runner.store.store import Store
from ajet_runner.workers.executors import build_executor
from ajet_runner.workers.executors.attempt import MARKER, attempt_env
from ajet_runner.workers.executors.environment import launch_environment
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.protocol import Executor
from ajet_runner.workers.gang.env import gang_env
from ajet_runner.workers.gang.paths import rank_marker, rank_paths, rank_session
from ajet_runner.workers.identity.this_node import NodeInfo

log = logging.getLogger(__name__)


class RankDriver:
    def __init__(self, store: Store, gangs: GangStore, exp_id: str, rank: int, settings: Settings,
                 node: NodeInfo, owner: str, runner: Executor | None = None,
                 handback: threading.Event | None = None) -> None:
        self.store = store
        self.gangs = gangs
        self.id = exp_id
        self.rank = rank
        self.settings = settings
        self.node = node
        self.owner = owner
        self.runner: Executor = runner or build_executor(settings)
        self.handle: RunHandle | None = None
        self.handback = handback  # set when the hosting process is stopping

    def run(self) -> str:
        """Follow the head until the experiment is done; "not-owner" when another job holds this rank."""
        if not self.gangs.claim_rank(self.id, self.rank, self.owner, self.settings.lease_seconds, self.node.name):
            return "not-owner"
        stopping = self.handback or threading.Event()
        while True:
            try:
                outcome = self._step()
            except REDIS_ERRORS as exc:  # cut off from Redis: the command goes on; try again
                log.warning("%s rank %d: redis unreachable: %s", self.id, self.rank, exc)
                outcome = None
            except Exception:
                self._hand_back()  # our own failure: the process (other runs' threads) lives on
                raise
            if outcome:
                if outcome != "not-owner":  # stopped here: nothing left to sweep (another job's rank is not ours)
                    with contextlib.suppress(*REDIS_ERRORS):
                        self.gangs.forget_rank_here(self.node.name, self.id, self.rank)
                return outcome
            if stopping.wait(self.settings.poll_interval):
                self._hand_back()
                return "handed-back"

    def _hand_back(self) -> None:
        """End our lease now (CAS on the owner); if Redis is unreachable it simply runs out."""
        try:
            if self.gangs.hand_back_rank(self.id, self.rank, self.owner):
                log.info("%s rank %d: handed back for the node's supervisor to re-adopt", self.id, self.rank)
        except REDIS_ERRORS as exc:
            log.warning("%s rank %d: could not hand back (%s): its lease will run out", self.id, self.rank, exc)

    def _step(self) -> str | None:
        rec = self.store.records.get(self.id)
        gang = self.gangs.get(self.id)
        if rec is None or gang is None:
            self._stop(gang)
            return "gone"
        if self.rank >= len(gang.nodes) or gang.nodes[self.rank] != self.node.name:
            self._stop(None)  # the rank moved to another node (this one was taken for lost): stop ours
            return "moved"
        if not self.gangs.claim_rank(self.id, self.rank, self.owner, self.settings.lease_seconds, self.node.name):
            return "not-owner"
        return self._phase(gang, rec)

    def _phase(self, gang: Gang, rec: ExperimentRecord) -> str | None:
        """Do what the head's launch phase asks of this rank: follow an attempt, stop, or end ("done")."""
        launch = gang.launch
        attempt = int(launch.get("attempt") or 0)
        phase = str(launch.get("phase") or "")
        if rec.finished or phase == "done":
            self._stop(gang)
            return "done"
        if phase == "stop":
            self._stop(gang)
        elif phase == "launch" and attempt:
            self._follow(gang, rec, launch, attempt)
        return None

    # -- one attempt -------------------------------------------------------------------------------
    def _mine(self, gang: Gang) -> dict[str, Any]:
        return gang.rank_state(self.rank)

    def _handle_of(self, mine: dict[str, Any]) -> RunHandle | None:
        if self.handle is None and mine.get("handle"):
            self.handle = RunHandle.from_dict(mine["handle"])  # re-adopted after a restart of this job
        return self.handle

    def _report(self, **state: Any) -> None:
        self.gangs.set_rank(self.id, self.rank, self.owner, {"node": self.node.name, "at": time.time(), **state})

    def _follow(self, gang: Gang, rec: ExperimentRecord, launch: dict[str, Any], attempt: int) -> None:
        mine = self._mine(gang)
        if mine.get("launch_id") != launch.get("id"):
            self._stop(gang, report=False)  # an earlier launch's command, if it still runs
            self._start(gang, rec, launch, attempt)
            return
        state = mine.get("state")
        if state == "starting":  # the previous job died between recording and starting: find it, else start
            found = self._find_started(rec, attempt)
            if found is None:
                self._start(gang, rec, launch, attempt)
            else:
                self.handle = found
                self._report(**{**mine, "state": "running", "handle": found.to_dict()})
            return
        if state == "running":
            handle = self._handle_of(mine)
            if handle is not None and not self.runner.is_running(handle):
                code = self.runner.exit_code(handle)
                self._cleanup()
                self._report(**{**mine, "state": "exited", "exit_code": code})
                log.info("%s rank %d: the command ended early (exit %s)", self.id, self.rank, code)

    def _start(self, gang: Gang, rec: ExperimentRecord, launch: dict[str, Any], attempt: int) -> None:
        bp = Blueprint.model_validate(rec.blueprint_json)
        session = rank_session(bp.exp_purpose, self.id, self.rank)
        paths = rank_paths(bp.exp_result_dir, attempt, self.rank)
        base = {"attempt": attempt, "launch_id": launch.get("id"), "session": session, "log": str(paths["log"])}
        self._report(**base, state="starting")
        self.gangs.note_rank_here(self.node.name, self.id, self.rank)  # swept by this node if the rank moves away
        if self.runner.exists(session):
            self.runner.kill_session(session)  # the previous attempt's lingering pane
        gpus = gang.gpus.get(self.node.name) if self.node.manages_gpus else None  # None: CUDA_VISIBLE_DEVICES unset
        env = attempt_env(bp, self.id, launch.get("env_overrides") or {}, gpus)
        env[MARKER] = rank_marker(self.id, self.rank)
        env.update(gang_env(launch, self.rank))
        try:
            self.handle = self.runner.start(session, str(launch.get("command") or ""), cwd=bp.exp_codebase_dir,
                                            env=env, log_path=paths["log"], rc_path=paths["rc"],
                                            pid_path=paths["pid"], base_env=self._base_env())
        except (OSError, RuntimeError) as exc:
            self._report(**base, state="exited", exit_code=None, error=f"could not start the tmux session: {exc}")
            return
        self._report(**base, state="running", handle=self.handle.to_dict(), started_at=self.handle.started_at)
        log.info("%s rank %d: attempt %d running in tmux session %s", self.id, self.rank, attempt, session)

    def _base_env(self) -> dict[str, str] | None:
        """The rank starts from this worker's environment less the control plane's (as the head's attempt)."""
        if self.runner.capabilities.host_environment:
            return None
        return launch_environment(self.settings).variables

    def _find_started(self, rec: ExperimentRecord, attempt: int) -> RunHandle | None:
        bp = Blueprint.model_validate(rec.blueprint_json)
        session = rank_session(bp.exp_purpose, self.id, self.rank)
        paths = rank_paths(bp.exp_result_dir, attempt, self.rank)
        if paths["rc"].exists():
            return None  # that attempt ended: nothing to adopt
        return self.runner.adopt(session, paths)

    # -- stopping ------------------------------------------------------------------------------
    def _stop(self, gang: Gang | None, *, report: bool = True) -> None:
        """Stop this rank's command (SIGINT, SIGTERM, SIGKILL) and every process it left; report it."""
        mine = self._mine(gang) if gang is not None else {}
        if mine.get("state") == "stopped" or (gang is not None and not mine):
            return  # stopped already, or never started
        handle = self._handle_of(mine) if mine else self.handle
        code = self._stop_command(handle) if handle is not None else None
        self._cleanup()
        self.handle = None
        if report and gang is not None:
            self._report(**{**mine, "state": "stopped", "exit_code": mine.get("exit_code", code)
                            if mine.get("state") == "exited" else code, "handle": None})

    def _stop_command(self, handle: RunHandle) -> int | None:
        """Stop the command if it still runs and close its session; its exit code (None when unknown)."""
        code = None
        if self.runner.is_running(handle):
            try:
                code = self.runner.stop(handle, self.settings.stop_grace_seconds)
            except RuntimeError as exc:
                log.warning("%s rank %d: stop left processes behind: %s", self.id, self.rank, exc)
        else:
            code = self.runner.exit_code(handle)
        with contextlib.suppress(Exception):
            self.runner.kill_session(handle.session)
        return code

    def _cleanup(self) -> None:
        killed = self.runner.kill_marked(MARKER, rank_marker(self.id, self.rank), grace=5.0)
        if killed:
            log.info("%s rank %d: killed %d leftover process(es)", self.id, self.rank, len(killed))
