"""Time an attempt spends waiting in a scheduler's queue (SLURM): shown, and not charged to the max time.

The experiment's clock (`exp_max_time`) and the attempt's (stall, first-step watchdog) start when the job
starts running, not when it was submitted: each tick the executor says whether the job still waits and
for how long it waited, and the watch loop moves both clocks forward by that much. The wait is kept on
each attempt (`queued_seconds`), so earlier attempts' waits stay uncharged after a relaunch or an adoption.
An event says when the job waits and why (`Reason=` as the scheduler gives it), and when it started.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ajet_runner.statemachine.durations import format_duration
from ajet_runner.statemachine.lifecycle import EventType
from ajet_runner.workers.executors.request import QueueState, TakesRequest

if TYPE_CHECKING:
    from ajet_runner.store.records import Attempt
    from ajet_runner.workers.drive.seam import Drive


class QueueWait:
    """One attempt's wait in the queue, looked at each tick of the watch loop."""

    def __init__(self) -> None:
        self.waited = 0.0
        self.shown: tuple[bool, str] | None = None

    @staticmethod
    def of(d: Drive) -> QueueWait | None:
        return QueueWait() if isinstance(d.runner, TakesRequest) else None

    @staticmethod
    def earlier(d: Drive) -> float:
        """What earlier attempts of this experiment waited (not charged either)."""
        return sum(a.queued_seconds or 0.0 for a in d.ctx.attempts if a.number != d.lc.attempt)

    def look(self, d: Drive) -> float:
        """This attempt's wait so far (seconds); publishes a change of its state."""
        assert d.handle is not None and isinstance(d.runner, TakesRequest)
        state = d.runner.queue_state(d.handle)
        if state is None:
            return self.waited
        self.waited = max(0.0, state.queued_seconds)
        attempt = _current(d)
        if attempt is not None:
            attempt.queued_seconds = round(self.waited, 1)
        key = (state.pending, state.reason if state.pending else "")
        if key != self.shown:
            first = self.shown is None
            self.shown = key
            self._announce(d, state, first)
        return self.waited

    def _announce(self, d: Drive, state: QueueState, first: bool) -> None:
        """A change of the job's queue state as an event: pending (with the scheduler's reason), or running
        after a wait (not said when it ran at once)."""
        job = f"job {state.job_id}"
        if state.pending:
            d.journal.publish({"type": EventType.info, "scheduler": state.scheduler, "job_id": state.job_id,
                               "pending_reason": state.reason,
                               "message": f"pending in {state.scheduler}: Reason={state.reason or 'None'} "
                                          f"({job}); the time waiting is not charged to the max time"})
        elif not first or self.waited > 0:
            on = f" on {state.node}" if state.node else ""
            d.journal.publish({"type": EventType.info, "scheduler": state.scheduler, "job_id": state.job_id,
                               "queued_seconds": round(self.waited, 1),
                               "message": f"{state.scheduler} {job} running{on} after "
                                          f"{format_duration(self.waited)} in "
                                          "the queue (not charged to the max time)"})


def _current(d: Drive) -> Attempt | None:
    return next((a for a in reversed(d.ctx.attempts) if a.number == d.lc.attempt), None)
