"""The SLURM executor: one attempt is one batch job, submitted from a login node by a worker (or `run`).

- Submit: the attempt's files are written into the result dir (shared with the compute nodes), then
  `sbatch` with `--job-name=ajet_<id>`, `--comment=ajet-runner:<id>:attempt-N`, `--gres=gpu:N` (the YAML's
  GPUs), `--time` (the max time plus the runner's grace and a margin: the runner stops the run first; the
  scheduler's limit is the backstop when no runner is watching), `--requeue`, `--open-mode=append`,
  `--export=NONE` (the job's environment is the launcher's, read by the wrapper from its env file; the
  worker's own variables never reach SLURM's state files), the partition and the site's own arguments.
- Watch: the wrapper's pid and rc files (shared disk) say whether the command started and how it ended;
  `scontrol show job` says whether the job still waits (and why: shown, and not charged to the max
  time), runs, or was taken back by the scheduler (a preemption or requeue: the attempt ends with a
  line in its log that the catalogue's `preempted` entry recognises, and the requeued job is cancelled so
  it never runs again into the same files: the runner relaunches, resuming from the checkpoint).
- Stop: INT to the batch shell (`scancel --signal=INT --batch`), which the wrapper passes to the
  command's own process group; after the grace, `scancel` (SIGTERM, SIGKILL after KillWait); the batch
  script sweeps what of this experiment is left on the node. A stop the runner asked for is remembered:
  SLURM calls it CANCELLED or FAILED, the runner does not.
- Adopt: a job is found again by its name and comment (`squeue --name`, then `scontrol show job` for a
  job that ended within MinJobAge).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shlex
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from ajet_runner.resultdir.confined import open_dir, write_at
from ajet_runner.workers.executors.attempt import MARKER
from ajet_runner.workers.executors.handle import RunHandle, read_int
from ajet_runner.workers.executors.protocol import Capabilities, ProcessesSurvived
from ajet_runner.workers.executors.request import AttemptRequest, QueueState
from ajet_runner.workers.executors.slurm.batch import batch_script
from ajet_runner.workers.executors.slurm.slurm_cli import TAKEN_BACK, JobInfo, Slurm, SlurmError, SlurmUnavailable
from ajet_runner.workers.executors.wrapper import (
    WrapperError,
    wrapper_text,
    write_attempt_files,
)

log = logging.getLogger(__name__)

# What the job adds to its environment and must keep over the launcher's (the wrapper's `keep`).
KEEP = "SLURM_*|SLURMD_*|CUDA_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL|ROCR_VISIBLE_DEVICES|TMPDIR"
GPU_CHOICE = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL")
TIME_MARGIN = 120.0  # seconds past max time + grace before SLURM's own limit (the runner stops it first)
LOOK_EVERY = 2.0  # seconds between two `scontrol show job` of one job while nothing changed
POLL = 0.05
RC_WAIT = 8.0
RC_SHOW_WAIT = 30.0  # a job SLURM calls ended, its rc file not visible yet (NFS attribute caching)
GONE_WAIT = 40.0  # after scancel: KillWait (30 s by default) plus a margin
START_WAIT = 5.0  # start(): how long to wait for the job's first line before returning a pending handle
_ATTEMPT = re.compile(r"attempt-(\d+)")


def job_name(exp_id: str) -> str:
    return f"ajet_{exp_id}"


def job_comment(exp_id: str, attempt: int) -> str:
    return f"ajet-runner:{exp_id}:attempt-{attempt}"


def time_limit(max_seconds: float | None, grace: float) -> str | None:
    """sbatch's `--time` in minutes (None: the partition's default)."""
    if not max_seconds or max_seconds <= 0:
        return None
    return str(max(1, math.ceil((max_seconds + max(grace, 0.0) + TIME_MARGIN) / 60.0)))


class SlurmExecutor:
    """Attempts as SLURM batch jobs; the runner's files on the shared filesystem."""

    socket_path: str | None = None

    def __init__(self, *, partition: str = "", extra_args: str = "", env: Mapping[str, str] | None = None,
                 look_every: float = LOOK_EVERY) -> None:
        self.partition = partition.strip()
        try:
            self.extra_args = shlex.split(extra_args or "")
        except ValueError as exc:
            raise ValueError(f"slurm_args {extra_args!r}: {exc}") from None
        self.slurm = Slurm(env)
        self.look_every = look_every
        self._requests: dict[str, AttemptRequest] = {}
        self._info: dict[str, tuple[float, JobInfo | None]] = {}  # job id -> (when looked, what SLURM said)
        self._settled: set[str] = set()  # jobs whose end was classified (and noted in the log)
        self._stopping: set[str] = set()  # jobs the runner itself stopped
        self._rc_wait: dict[str, float] = {}  # job id -> when it was first seen ended without a visible rc
        self._lock = threading.Lock()

    # --- what it is ---------------------------------------------------------------------------
    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(name="slurm", attach=True, shared_files=True, picks_gpus=True, local_pids=False)

    def remote(self, refresh: bool = False) -> bool:
        return True  # the job's pids are a compute node's

    def request(self, session: str, request: AttemptRequest) -> None:
        self._requests[session] = request

    def attach_command(self, handle: RunHandle) -> str:
        job = f" (SLURM job {handle.job_id}; a shell in it: srun --overlap --jobid={handle.job_id} --pty bash)" \
            if handle.job_id else ""
        return f"tail -F {shlex.quote(str(handle.log_path))}{job}"

    # --- sessions: an experiment's jobs -------------------------------------------------------
    def _exp_of(self, session: str) -> str | None:
        req = self._requests.get(session)
        return req.exp_id if req is not None else None

    def exists(self, session: str) -> bool:
        exp_id = self._exp_of(session)
        if exp_id is None:
            return False
        try:
            return any(not j.ended for j in self.slurm.find(job_name(exp_id)))
        except SlurmUnavailable:
            return False  # nothing can be queued where nothing answers: sbatch then says why

    def kill_session(self, session: str) -> None:
        """Cancel every job of this experiment still queued or running (a previous attempt's leftover)."""
        exp_id = self._exp_of(session)
        if exp_id is not None:
            try:
                jobs = self.slurm.find(job_name(exp_id))
            except SlurmUnavailable:
                return
            for job in jobs:
                if not job.ended:
                    self._stopping.add(job.job_id)
                    self.slurm.cancel(job.job_id)

    # --- start --------------------------------------------------------------------------------
    def start(self, session: str, command: str, *, cwd: str, env: Mapping[str, str], log_path: Path,
              rc_path: Path, pid_path: Path, pid_timeout: float = 10.0, reserve_path: Path | None = None,
              base_env: Mapping[str, str] | None = None) -> RunHandle:
        """Write the attempt's files and submit its job; returns once it runs, or with a pending handle.

        Raises SlurmError quoting sbatch when the job is refused (nothing is left queued)."""
        if not Path(cwd).is_dir():
            raise NotADirectoryError(cwd)
        log_path, rc_path, pid_path = Path(log_path), Path(rc_path), Path(pid_path)
        if rc_path.parent != log_path.parent or pid_path.parent != log_path.parent:
            raise ValueError("the log, rc and pid files must share one directory")
        req = self._requests.get(session) or self._guess_request(env, log_path)
        # The scheduler picks the GPUs (`--gres`): a CUDA_VISIBLE_DEVICES from the runner's side (a node's slots,
        # a repair's confinement) would override the one SLURM gives the job, and name GPUs it does not hold.
        env = {k: v for k, v in env.items() if k not in GPU_CHOICE}
        wrapper = log_path.with_name(log_path.stem + ".sh")
        script = log_path.with_name(log_path.stem + ".sbatch.sh")
        out = log_path.with_name(log_path.stem + ".slurm.out")
        dfd = open_dir(log_path.parent)
        try:
            logs_id, command_file, reserve, env_file = write_attempt_files(
                dfd, log_path, rc_path, pid_path, command, reserve_path, base_env)
            try:
                text = wrapper_text(session, command_file, cwd, env, log_path, rc_path, pid_path, 0,
                                    logs_id=logs_id, reserve=reserve, env_file=env_file, keep=KEEP)
                batch = batch_script(exp_id=req.exp_id, attempt=req.attempt, wrapper=wrapper, log=log_path,
                                     marker=f"{MARKER}={env.get(MARKER, req.exp_id)}", logs_id=logs_id)
            except WrapperError as exc:
                raise SlurmError(str(exc)) from exc
            write_at(dfd, wrapper.name, text.encode(), mode=0o755)
            write_at(dfd, script.name, batch.encode(), mode=0o755)
        finally:
            os.close(dfd)
        args = self.sbatch_args(req, out=out, workdir=log_path.parent)
        submitted = time.time()
        job_id = self.slurm.sbatch(args, str(script))
        handle = RunHandle(session=session, log_path=log_path, rc_path=rc_path, pid_path=pid_path,
                           wrapper_path=wrapper, executor="slurm", job_id=job_id, started_at=submitted,
                           files=[str(out)])
        handle.wait_for_pid(min(pid_timeout, START_WAIT), local=False)
        return handle

    def sbatch_args(self, req: AttemptRequest, *, out: Path, workdir: Path) -> list[str]:
        args = [f"--job-name={job_name(req.exp_id)}", f"--comment={job_comment(req.exp_id, req.attempt)}",
                f"--output={out}", f"--chdir={workdir}", "--open-mode=append", "--requeue", "--export=NONE"]
        if req.gpus > 0:
            args.append(f"--gres=gpu:{req.gpus}")
        limit = time_limit(req.max_seconds, req.grace_seconds)
        if limit is not None:
            args.append(f"--time={limit}")
        if self.partition:
            args.append(f"--partition={self.partition}")
        return args + self.extra_args

    @staticmethod
    def _guess_request(env: Mapping[str, str], log_path: Path) -> AttemptRequest:
        """Without the driver's request (a direct caller): the marker's id, the attempt in the file name."""
        m = _ATTEMPT.search(log_path.name)
        return AttemptRequest(exp_id=env.get(MARKER, "run"), attempt=int(m.group(1)) if m else 1, gpus=0,
                              max_seconds=None, grace_seconds=0.0)

    # --- adopt --------------------------------------------------------------------------------
    def adopt(self, session: str, paths: Mapping[str, Path]) -> RunHandle | None:
        """This attempt's job, found by name and comment (a worker that died between sbatch and the record)."""
        req = self._requests.get(session)
        if req is None:
            return None
        comment = job_comment(req.exp_id, req.attempt)
        try:
            found = self.slurm.find(job_name(req.exp_id), ended_too=paths["pid"].exists())
        except SlurmUnavailable:
            if paths["pid"].exists():
                raise  # it started: which job it is must be known before anything is decided
            return None  # nothing started that we could watch; submitting says what SLURM says
        job = _newest(found, comment)
        if job is None and not paths["pid"].exists():
            return None  # never submitted, or submitted and gone without starting: launch again
        log_path = paths["log"]
        handle = RunHandle(session=session, log_path=log_path, rc_path=paths["rc"], pid_path=paths["pid"],
                           wrapper_path=log_path.with_name(log_path.stem + ".sh"), executor="slurm",
                           job_id=job.job_id if job else None,
                           started_at=(job.submit_time or time.time()) if job else time.time(),
                           files=[str(log_path.with_name(log_path.stem + ".slurm.out"))])
        handle.wait_for_pid(0, local=False)
        return handle

    # --- watch ----------------------------------------------------------------------------------
    def _look(self, job_id: str, *, fresh: bool = False) -> JobInfo | None:
        now = time.monotonic()
        with self._lock:
            seen = self._info.get(job_id)
        if seen is not None and not fresh and now - seen[0] < self.look_every:
            return seen[1]
        try:
            info = self.slurm.show(job_id)
        except SlurmUnavailable as exc:  # the controller is away: what was last seen still holds
            log.warning("SLURM job %s: %s", job_id, exc)
            return seen[1] if seen is not None else JobInfo(job_id=job_id, state="UNKNOWN")
        with self._lock:
            self._info[job_id] = (now, info)
        return info

    def sync(self, handle: RunHandle) -> None:
        """Look at the job (at most every `look_every` s): the files are on the shared disk already."""
        if handle.job_id:
            self._look(handle.job_id)
            if handle.pid is None:
                handle.wait_for_pid(0, local=False)

    def queue_state(self, handle: object) -> QueueState | None:
        """Whether the job still waits for resources, and for how long it waited."""
        if not isinstance(handle, RunHandle) or not handle.job_id:
            return None
        info = self._look(handle.job_id)
        if info is None or info.state == "UNKNOWN":
            return None
        started = handle.pid is not None or handle.pid_path.exists()
        pending = info.pending and not started and info.restarts == 0
        return QueueState(pending=pending, queued_seconds=info.queued_seconds(time.time()), reason=info.reason,
                          job_id=info.job_id, node=info.node, scheduler="SLURM")

    def is_running(self, handle: RunHandle) -> bool:
        """Queued or running: the rc file is not written and SLURM still holds the job for this attempt."""
        if handle.pid is None:
            handle.wait_for_pid(0, local=False)
        if handle.rc_path.exists():
            self._settle(handle)
            return False
        if not handle.job_id:
            return False
        info = self._look(handle.job_id)
        if info is not None and info.state == "UNKNOWN":
            return True  # the controller does not answer: nothing says the run ended
        if not _over(info):
            return True
        info = self._look(handle.job_id, fresh=True)  # over: as SLURM says it now, not as cached
        if not _over(info) or self._rc_may_still_show(handle, info):
            return True
        self._settle(handle, info)
        return False

    def _rc_may_still_show(self, handle: RunHandle, info: JobInfo | None) -> bool:
        """The job ended normally but its rc file is not visible yet: a shared filesystem's attribute cache
        shows another node's new file seconds late. Give it RC_SHOW_WAIT before calling the code lost."""
        if info is None or info.state not in ("COMPLETED", "FAILED") or not handle.pid_path.exists():
            return False
        first = self._rc_wait.setdefault(handle.job_id or "", time.monotonic())
        with contextlib.suppress(OSError):
            os.listdir(handle.rc_path.parent)  # a fresh directory read revalidates an NFS client's cache
        return time.monotonic() - first < RC_SHOW_WAIT

    def _settle(self, handle: RunHandle, info: JobInfo | None = None) -> None:
        """Once per job, when the attempt is over: a job the scheduler took back is noted in the log (the
        `preempted` line) and cancelled, so SLURM never runs it again into the same files."""
        job_id = handle.job_id
        if not job_id or job_id in self._settled:
            return
        self._settled.add(job_id)
        if job_id in self._stopping:
            return
        self._explain_end(handle, job_id, info or self._look(job_id, fresh=True))

    def _explain_end(self, handle: RunHandle, job_id: str, info: JobInfo | None) -> None:
        """Why the job ended, in the attempt's log, when SLURM (not the command) ended it; a job the
        scheduler took back is cancelled too."""
        if info is None:
            self._note(handle, f"SLURM no longer knows job {job_id} (ended more than MinJobAge ago, or removed)")
            return
        if info.restarts > 0 or info.state in TAKEN_BACK:
            self._note(handle, f"SLURM preempted job {job_id}: JobState={info.state} Reason={info.reason or 'None'} "
                       f"Restarts={info.restarts}; the attempt ended and the job is cancelled here, so SLURM does "
                       "not run it again; the runner relaunches it as a new attempt, resuming from its checkpoint")
            with contextlib.suppress(SlurmError):
                self.slurm.cancel(job_id)
            return
        if info.state not in ("COMPLETED", "RUNNING", "COMPLETING"):
            self._note(handle, f"SLURM ended job {job_id}: JobState={info.state} Reason={info.reason or 'None'} "
                       f"ExitCode={info.exit_code or '?'}")

    @staticmethod
    def _note(handle: RunHandle, text: str) -> None:
        """A line in the attempt's log, where the diagnosis and a person read it."""
        with contextlib.suppress(OSError), open(handle.log_path, "a", encoding="utf-8") as fh:
            fh.write(f"[ajet-runner] {text}\n")

    def exit_code(self, handle: RunHandle) -> int | None:
        return read_int(handle.rc_path)

    def wait_for_exit(self, handle: RunHandle, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while (rc := self.exit_code(handle)) is None and time.monotonic() < deadline:
            if handle.job_id and handle.pid is None and not handle.pid_path.exists():
                info = self._look(handle.job_id)
                if info is None or info.ended:
                    return None  # the command never started: no exit code will come
            time.sleep(POLL)
        return rc

    # --- stop -----------------------------------------------------------------------------------
    def stop(self, handle: RunHandle, grace: float) -> int | None:
        """INT to the command (through the batch shell and the wrapper), `scancel` after `grace`; returns
        once SLURM says the job ended. Raises ProcessesSurvived naming the job if it does not."""
        job_id = handle.job_id
        if not job_id:
            return self.exit_code(handle)
        self._stopping.add(job_id)
        info = self._look(job_id, fresh=True)
        started = handle.pid_path.exists()
        if info is not None and not info.ended:
            self._end_job(handle, job_id, started, grace)
        if not self._wait_ended(job_id, GONE_WAIT):
            raise ProcessesSurvived([int(job_id)])
        return self.wait_for_exit(handle, RC_WAIT if started else 0.0)

    def _end_job(self, handle: RunHandle, job_id: str, started: bool, grace: float) -> None:
        """A job SLURM still holds: INT to a command still running (through the batch shell), `grace` for it
        to exit, then `scancel`."""
        if started and not handle.rc_path.exists():
            with contextlib.suppress(SlurmError):
                self.slurm.cancel(job_id, signal="INT", batch=True)
            self.wait_for_exit(handle, grace)
        if not started:
            self._note(handle, f"stopped while pending in SLURM (job {job_id}): the command never started")
        with contextlib.suppress(SlurmError):
            self.slurm.cancel(job_id)

    def _wait_ended(self, job_id: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            info = self._look(job_id, fresh=True)
            if info is None or (info.ended and info.state != "COMPLETING"):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.25)

    def kill_marked(self, name: str, value: str, grace: float) -> list[int]:
        """The batch script sweeps the experiment's processes on its node when the wrapper ends; the
        node's pids are not ours to list from here."""
        return []


def _over(info: JobInfo | None) -> bool:
    """SLURM forgot the job, it ended, or the scheduler took it back (preempted, requeued)."""
    return info is None or info.ended or info.state in TAKEN_BACK or info.restarts > 0


def _newest(found: list[JobInfo], comment: str) -> JobInfo | None:
    """The newest of the jobs with this attempt's comment (the highest job id)."""
    jobs = sorted((j for j in found if j.comment == comment), key=lambda j: int(j.job_id) if j.job_id.isdigit() else 0)
    return jobs[-1] if jobs else None
