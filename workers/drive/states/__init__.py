"""One handler per lifecycle state: `handle(driver) -> bool` does that state's I/O and fires the next
trigger; False hands the job back to its queue without finishing (e.g. no GPUs free here).

The driver (workers/drive/driver.py) keeps what every state shares: loading the record, `fire`, the lease,
the journal. A handler sees it only through the `Drive` protocol (workers/drive/seam.py): what it may use.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ajet_runner.statemachine.lifecycle import State
from ajet_runner.workers.drive.states import collecting, failing, launching, queued, repairing, running

if TYPE_CHECKING:
    from ajet_runner.workers.drive.seam import Drive

Handler = Callable[["Drive"], bool]

HANDLERS: dict[str, Handler] = {
    State.queued.value: queued.handle,
    State.launching.value: launching.handle,
    State.running.value: running.handle,
    State.failing.value: failing.handle,
    State.repairing.value: repairing.handle,
    State.collecting.value: collecting.handle,
}
