"""What the drivers hosted by one process share: the stop signal, and one watch-metrics reporter.

The node's watcher (workers/node/watcher.py) runs every experiment's driver as a thread of one
process; these are the few things they have in common. Outside a watcher (a driver run in the
API's process to finish a cancelled run, a test) each job gets its own reporter and no stop
signal, as before.
"""

from __future__ import annotations

import threading

from ajet_runner.store.store import Store
from ajet_runner.workers.node.worker_metrics import WatchReporter


class DriverHost:
    def __init__(self) -> None:
        self.active = False  # True in a watcher process (set by workers/node/watcher.py)
        self.stopping = threading.Event()  # the process is stopping: drivers hand their runs back
        self._reporter: WatchReporter | None = None
        self._lock = threading.Lock()

    def reporter(self, store: Store, node: str) -> WatchReporter:
        """The reporter to give a driver: the process's one in a watcher, else a new one (its `close()`
        at the end of a job sends what is left either way)."""
        if not self.active:
            return WatchReporter(store, node)
        with self._lock:
            if self._reporter is None:
                self._reporter = WatchReporter(store, node)
            return self._reporter

    def handback(self) -> threading.Event | None:
        return self.stopping if self.active else None


HOST = DriverHost()
