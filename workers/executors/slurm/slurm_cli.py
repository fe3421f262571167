"""SLURM's own commands, called as a user would on a login node: `sbatch` to submit, `squeue` and
`scontrol show job` to look, `scancel` to stop. No accounting daemon is assumed (no `sacct`): a finished
job stays visible in `scontrol show job` for the site's MinJobAge.

SLURM's environment (SLURM_CONF and the rest) is the caller's: these commands inherit it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ajet_runner.statemachine.durations import format_limit
from ajet_runner.workers.executors.protocol import ExecutorError

TIMEOUT = 60.0  # a controller that does not answer: sbatch itself retries for about MessageTimeout
ENDED = frozenset({"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
                   "PREEMPTED", "TIMEOUT", "SPECIAL_EXIT"})
# States in which the scheduler took the job back from its node (the attempt is over; SLURM may run it again).
TAKEN_BACK = frozenset({"PREEMPTED", "NODE_FAIL", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "BOOT_FAIL"})
_FIELD = re.compile(r"(?:^|\s)([A-Za-z/:]+)=")


class SlurmError(ExecutorError):
    """A SLURM command failed; the message quotes what SLURM said."""


class SlurmUnavailable(SlurmError):
    """SLURM's commands are not installed, or the controller does not answer."""


@dataclass(frozen=True)
class JobInfo:
    """What `scontrol show job -o` says about one job (the fields the executor reads)."""

    job_id: str
    state: str  # PENDING, RUNNING, COMPLETING, COMPLETED, CANCELLED, REQUEUED, …
    reason: str = ""
    restarts: int = 0
    name: str = ""
    comment: str = ""
    node: str = ""
    exit_code: str = ""
    submit_time: float | None = None
    start_time: float | None = None
    end_time: float | None = None

    @property
    def pending(self) -> bool:
        return self.state in ("PENDING", "CONFIGURING") or self.state.startswith("REQUEUE")

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    def queued_seconds(self, now: float) -> float:
        """How long the job waited for its resources (so far, while it still waits)."""
        if self.submit_time is None:
            return 0.0
        if self.pending or self.start_time is None or self.start_time < self.submit_time:
            return max(0.0, now - self.submit_time) if self.pending else 0.0
        return self.start_time - self.submit_time


def parse_fields(line: str) -> dict[str, str]:
    """`Key=value Key2=value two …` (scontrol's one-line form; a value may contain spaces: `Comment=`)."""
    marks = [(m.start(1), m.end(), m.group(1)) for m in _FIELD.finditer(line)]
    out: dict[str, str] = {}
    for i, (_, end, key) in enumerate(marks):
        stop = marks[i + 1][0] if i + 1 < len(marks) else len(line)
        out.setdefault(key, line[end:stop].strip())
    return out


def _when(text: str) -> float | None:
    """SLURM prints local time without a zone (`2026-12-03T14:51:51`); `Unknown`/`None` → None."""
    try:
        tm = time.strptime(text, "%Y-%m-%dT%H:%M:%S")
    except ValueError:
        return None
    return time.mktime(tm)


def job_info(fields: Mapping[str, str]) -> JobInfo:
    state = fields.get("JobState", "")
    return JobInfo(
        job_id=fields.get("JobId", ""), state=state, reason=fields.get("Reason", ""),
        restarts=int(fields.get("Restarts", "0") or 0), name=fields.get("JobName", ""),
        comment=fields.get("Comment", "").strip(), node=fields.get("NodeList", "").replace("(null)", ""),
        exit_code=fields.get("ExitCode", ""), submit_time=_when(fields.get("SubmitTime", "")),
        start_time=_when(fields.get("StartTime", "")) if state not in ("PENDING",) else None,
        end_time=_when(fields.get("EndTime", "")) if state in ENDED else None,
    )


class Slurm:
    """The four commands, with SLURM's own words in every error."""

    def __init__(self, env: Mapping[str, str] | None = None, timeout: float = TIMEOUT) -> None:
        self.env = dict(os.environ if env is None else env)
        self.timeout = timeout

    def _run(self, args: Sequence[str], *, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        tool = shutil.which(args[0], path=self.env.get("PATH"))
        if tool is None:
            raise SlurmUnavailable(f"`{args[0]}` is not installed on this node (SLURM's client commands are needed "
                                   "on the node that submits: Debian/Ubuntu `apt-get install slurm-client`)")
        try:
            return subprocess.run([tool, *args[1:]], input=stdin, capture_output=True, text=True, env=self.env,
                                  timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            raise SlurmUnavailable(f"`{' '.join(args[:2])}` did not answer in {format_limit(self.timeout)}: the SLURM "
                                   "controller looks down or unreachable") from None

    @staticmethod
    def _said(proc: subprocess.CompletedProcess[str]) -> str:
        text = " ".join(ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip())
        return text or f"exit status {proc.returncode}"

    def sbatch(self, args: Sequence[str], script: str) -> str:
        """Submit; the job id. Raises SlurmError quoting sbatch (a bad partition, too many GPUs, no controller)."""
        proc = self._run(["sbatch", "--parsable", *args, script])
        if proc.returncode != 0:
            said = self._said(proc)
            down = _controller_down(said)
            cls = SlurmUnavailable if down else SlurmError
            raise cls(f"sbatch refused the job: «{said}»; next: {self._next_step(said, args, down)}")
        job_id = proc.stdout.strip().split(";", 1)[0]
        if not job_id.isdigit():
            raise SlurmError(f"sbatch answered no job id: «{proc.stdout.strip()}»")
        return job_id

    def _next_step(self, said: str, args: Sequence[str], down: bool) -> str:
        """What a person does about this refusal (nothing was queued)."""
        gres = next((a.split(":", 1)[1] for a in args if a.startswith("--gres=gpu:")), "")
        if down:
            conf = self.env.get("SLURM_CONF", "the default slurm.conf")
            return (f"the SLURM controller does not answer (SLURM_CONF={conf}): `scontrol ping` says whether it is up; "
                    "resubmit once it is")
        if "partition" in said.lower():
            return "`sinfo -s` lists the partitions you may use; pass one with --partition (or slurm_partition)"
        if gres and ("node configuration" in said.lower() or "gres" in said.lower()):
            return (f"the job asks for {gres} GPU(s) (--gres=gpu:{gres}: the YAML's n_gpus_per_node x nnodes) and no "
                    "node of the partition has that many: lower n_gpus_per_node or choose a partition with bigger "
                    "nodes (`sinfo -o '%P %G'`)")
        return "check the partition, the GPUs asked for and the extra sbatch arguments (--sbatch-arg), then resubmit"

    def show(self, job_id: str) -> JobInfo | None:
        """The job as the controller knows it; None once it is gone (past MinJobAge, or never existed)."""
        proc = self._run(["scontrol", "-o", "show", "job", job_id])
        if proc.returncode != 0:
            said = self._said(proc)
            if "Invalid job id" in said:
                return None
            raise SlurmUnavailable(f"scontrol show job {job_id}: «{said}»")
        lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
        return job_info(parse_fields(lines[0])) if lines else None

    def find(self, name: str, *, ended_too: bool = False) -> list[JobInfo]:
        """The jobs of this name in the queue (pending, running, completing); `ended_too`: when none is, the
        ones that ended within MinJobAge (every job the controller knows is listed for that: not every tick)."""
        proc = self._run(["squeue", "-h", f"--name={name}", "-o", "%i|%T|%k|%N|%M"])
        if proc.returncode != 0:
            raise SlurmUnavailable(f"squeue --name={name}: «{self._said(proc)}»")
        ids = [ln.split("|", 1)[0].strip() for ln in proc.stdout.splitlines() if ln.strip()]
        found = [info for job_id in ids if (info := self.show(job_id)) is not None]
        return found if found or not ended_too else self._ended(name)

    def _ended(self, name: str) -> list[JobInfo]:
        """The jobs of this name the controller still knows (ended ones leave squeue but not scontrol)."""
        every = self._run(["scontrol", "-o", "show", "job"])
        if every.returncode != 0:
            return []
        return [info for ln in every.stdout.splitlines() if ln.strip()
                if (info := job_info(parse_fields(ln))).name == name]

    def cancel(self, job_id: str, *, signal: str | None = None, batch: bool = False) -> None:
        """`scancel`: a signal only (INT to the batch shell), or the job (TERM, then KILL after KillWait)."""
        args = ["scancel"] + ([f"--signal={signal}"] if signal else []) + (["--batch"] if batch else []) + [job_id]
        proc = self._run(args)
        said = self._said(proc) if proc.returncode != 0 else ""
        if proc.returncode != 0 and "already completing or completed" not in said and "Invalid job id" not in said:
            raise SlurmError(f"scancel {job_id}: «{said}»")

    def cancel_named(self, name: str) -> None:
        self._run(["scancel", f"--name={name}"])


def _controller_down(said: str) -> bool:
    return any(s in said for s in ("Unable to contact slurm controller", "Connection refused",
                                   "Socket timed out", "Zero Bytes were transmitted"))
