"""SIGTERM/SIGINT for `ajet-runner worker`: an orderly stop, always over within STOP_DEADLINE_SECONDS.

A Python signal handler runs in the main thread between two bytecodes, possibly while that thread holds a
lock. The worker's handler used to call `threading.Event.set()` (a lock inside): a second signal landing
while the first handler held that lock ran a second handler that waited for it for ever, and every later
signal nested one more waiter, so the worker ignored SIGTERM until SIGKILL. Here the Python handler does
nothing; the signal's number reaches a socket (`signal.set_wakeup_fd`, written from C) and a thread of its
own does the rest, where taking locks is safe:

- first signal: `stopping` is set (the watcher's drivers hand their runs back, the outbox drains);
- a second SIGTERM/SIGINT: the process ends at once (exit 128 + the signal), the watcher with it;
- still here STOP_DEADLINE_SECONDS after the first (a thread stuck on Redis, a watcher that does not end):
  every thread's stack goes to stderr and the process ends (exit 1).
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable

from ajet_runner.statemachine.durations import format_duration

STOP_DEADLINE_SECONDS = 15.0
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _noted(signum: int, frame: object) -> None:
    """The Python-level handler: nothing (the wakeup fd already carries the signal to the relay thread)."""


class StopSignals:
    """Installed once, from the main thread, by the worker command."""

    def __init__(self, stopping: threading.Event, watcher_pid: Callable[[], int | None],
                 deadline: float = STOP_DEADLINE_SECONDS) -> None:
        self.stopping = stopping
        self.watcher_pid = watcher_pid  # killed with us on a forced exit (it also has PR_SET_PDEATHSIG)
        self.deadline = deadline
        self._reader, self._writer = socket.socketpair()

    def install(self) -> None:
        self._writer.setblocking(False)
        signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        for sig in SIGNALS:
            signal.signal(sig, _noted)
        threading.Thread(target=self._relay, name="stop-signals", daemon=True).start()

    def _relay(self) -> None:
        first = 0.0
        while True:
            timeout = None if not first else max(0.0, first + self.deadline - time.monotonic())
            ready, _, _ = select.select([self._reader], [], [], timeout)
            if not ready:
                _say(logging.ERROR, f"worker: still running {format_duration(self.deadline)} after the stop signal: "
                     "exiting now; the threads were:")
                faulthandler.dump_traceback(all_threads=True)
                self._exit(1)
            for signum in self._reader.recv(64):
                if signum not in SIGNALS:
                    continue
                name = signal.Signals(signum).name
                if first:
                    _say(logging.WARNING, f"worker: second stop signal ({name}): exiting now")
                    self._exit(128 + signum)
                first = time.monotonic()
                _say(logging.INFO, f"worker: {name}: stopping (the watcher's runs are handed back; a second "
                     f"SIGTERM/SIGINT exits at once; at most {format_duration(self.deadline)})")
                self.stopping.set()

    def _exit(self, code: int) -> None:
        pid = self.watcher_pid()
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        os._exit(code)


def _say(level: int, text: str) -> None:
    """A line on stderr in the worker's log format (text or JSON lines), without taking a lock: the stuck thread
    may hold a logging handler's. The root handler's filter and formatter are lock-free; its emit is not."""
    record = logging.LogRecord(__name__, level, __file__, 0, text, None, None)
    line = text
    for handler in logging.getLogger().handlers[:1]:
        with contextlib.suppress(Exception):
            handler.filter(record)  # the component, node and context fields
            line = handler.format(record)
    with contextlib.suppress(OSError):
        os.write(2, (line + "\n").encode())
