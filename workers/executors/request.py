"""What an executor that asks a scheduler for resources must know about an attempt before it starts it:
whose it is, which attempt, how many GPUs and for how long. The driver hands it over just before
`start()` / `adopt()` (workers/drive/states/launching.py); executors that run where they are told
(local tmux, ssh) do not take it. Kept apart from `Executor` so those need not change.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class AttemptRequest:
    exp_id: str
    attempt: int
    gpus: int  # GPUs the run asks for (`n_gpus_per_node` x `nnodes` of the YAML it launches with)
    max_seconds: float | None  # the blueprint's max time (None: no limit)
    grace_seconds: float  # the runner's time-limit grace (a scheduler's own limit comes after it)


@dataclass(frozen=True)
class QueueState:
    """Where an attempt is in the scheduler's queue, for the record and the time limit."""

    pending: bool  # still waiting for resources: its command has not started
    queued_seconds: float  # how long it waited (so far); not charged to the max time
    reason: str = ""  # the scheduler's reason while it waits (`Resources`, `Priority`, …)
    job_id: str = ""
    node: str = ""
    scheduler: str = ""  # "SLURM"


@runtime_checkable
class TakesRequest(Protocol):
    """An executor that schedules: it gets the attempt's request and says where its job is in the queue."""

    def request(self, session: str, request: AttemptRequest) -> None: ...

    def queue_state(self, handle: object) -> QueueState | None: ...
