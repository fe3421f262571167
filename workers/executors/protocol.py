"""What the driver, its state handlers, the gang ranks and the swarm hooks need from an executor: start an
attempt, observe it (alive, exit code, its log in the result dir), stop it, find it again after a worker
restart, clean up what it left. The lifecycle, rules, diagnosis, repairs and reports never learn which
executor ran an attempt.

The family (dramatiq's `brokers/` is the model): `local` (workers/executors/local/tmux.py, a tmux session
beside the worker), `ssh` (a tmux server on a host the blueprint names), `slurm` (a batch job), and `stub`
(workers/executors/stub.py, scripted attempts in memory for unit tests). mypy checks each against
`Executor` wherever one is passed as one; `build_executor` in workers/executors/__init__.py is the one
place an executor is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ajet_runner.workers.executors.handle import RunHandle


@dataclass(frozen=True)
class Capabilities:
    """What an executor can do, for the driver's choices and for `nodes`, the console and `docs/executors.md`."""

    name: str
    attach: bool = True  # a person can attach to the run (`attach_command`)
    shared_files: bool = True  # the result dir the runner reads is the one the run writes (else fetched)
    picks_gpus: bool = False  # the executor (a scheduler) chooses GPUs, not the runner's node slots
    local_pids: bool = True  # the run's pids are in our PID namespace (pidfd waits, psutil)
    host_environment: bool = False  # the job starts from the host's login environment, not the launcher's


class ExecutorError(RuntimeError):
    """Base of the executors' errors: the message names the executor's own words (host, scheduler)."""


class SessionExists(ExecutorError):
    """A session of that name already runs: never launch a second copy."""


class ProcessesSurvived(ExecutorError):
    """stop() signalled everything, but these pids are still alive (uninterruptible sleep?)."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(f"processes still alive after SIGKILL: {pids}")
        self.pids = pids


@runtime_checkable
class Executor(Protocol):
    """Sessions, the attempt in them, and a scoped cleanup, wherever the attempt runs."""

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def socket_path(self) -> str | None:
        """The tmux socket the sessions live on, where there is one (None: tmux's default server)."""
        ...

    def remote(self, refresh: bool = False) -> bool:
        """True when the run's processes are not in our PID namespace (no psutil, no os.kill, no pidfd)."""
        ...

    def exists(self, session: str) -> bool: ...

    def kill_session(self, session: str) -> None: ...

    def start(self, session: str, command: str, *, cwd: str, env: Mapping[str, str], log_path: Path,
              rc_path: Path, pid_path: Path, pid_timeout: float = 10.0,
              reserve_path: Path | None = None, base_env: Mapping[str, str] | None = None) -> RunHandle:
        """Run `command` in a new session, its output in `log_path`, its exit code in `rc_path`.

        `env` is exported over `base_env`; with `base_env` given the job sees nothing else (what the
        host adds for the job, such as SLURM's variables, excepted); None: the host's login environment."""
        ...

    def adopt(self, session: str, paths: Mapping[str, Path]) -> RunHandle | None:
        """The attempt with these files if its wrapper started it (a crash between start and recording
        it); None if it never started or its session vanished without an exit code."""
        ...

    def sync(self, handle: RunHandle) -> None:
        """Bring the run's files up to date where the runner reads them (a no-op on a shared filesystem)."""
        ...

    def is_running(self, handle: RunHandle) -> bool: ...

    def exit_code(self, handle: RunHandle) -> int | None: ...

    def wait_for_exit(self, handle: RunHandle, timeout: float) -> int | None: ...

    def stop(self, handle: RunHandle, grace: float) -> int | None:
        """Interrupt, then terminate, then kill after `grace` seconds; the exit code."""
        ...

    def kill_marked(self, name: str, value: str, grace: float) -> list[int]:
        """Stop the processes whose environment has `name=value`, where the runs live; their pids."""
        ...

    def attach_command(self, handle: RunHandle) -> str:
        """What a person types to watch the run live ("" when nothing can be attached)."""
        ...


def executor_notices(runner: Executor) -> list[dict[str, Any]]:
    """Events an executor has to tell since it was last asked (ssh: the link went away, came back)."""
    notices = getattr(runner, "notices", None)
    return list(notices()) if callable(notices) else []


def executor_lost(runner: Executor, handle: RunHandle) -> str:
    """Why an executor gives a run up without an exit code (ssh: the host unreachable past its limit), or ""."""
    lost = getattr(runner, "lost", None)
    return str(lost(handle)) if callable(lost) else ""


Runner = Executor  # the name the node side used before the family had others
