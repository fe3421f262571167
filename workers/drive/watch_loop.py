"""One thread that ticks every quiet watch of the process, back to back.

Thirty runs watched by thirty threads, each waking once a poll interval at its own moment, cost
0.071 % of a core per run: every tick found the CPU caches cold (reading and scanning a few new log
lines took 176 µs, 35 µs when ticks follow each other). So a driver whose run is quiet — alive, its
pidfd held, its log caught up — lends its ticks to the process's one `WatchLoop`: it sleeps in one
`select` over every lent run's pidfd and wake pipe, and ticks the runs that are due in one pass,
on a shared grid of the poll interval. Whatever is not a quiet tick goes back to the driver's thread:
an ended process (its exit code is waited for), a log backlog (read slice after slice), a proposal
(the stop takes seconds), an error (raised in the driver). So the shared thread never blocks on a run
and never holds one longer than a tick.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import selectors
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ajet_runner.workers.executors.exit_wait import ExitWaiter

log = logging.getLogger(__name__)
Tick = Callable[[], float | None]  # one pass; the monotonic time of the next, or None: give the run back


@dataclass(eq=False)
class _Lent:
    tick: Tick
    waiter: ExitWaiter
    due: float
    context: contextvars.Context = field(default_factory=contextvars.copy_context)  # the driver's log binding, roots
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None
    withdrawn: bool = False  # the lender is unwinding (Ctrl-C in a driver on the main thread): give it back


class WatchLoop:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._incoming: list[_Lent] = []
        self._lent: list[_Lent] = []  # the loop thread's own: admitted, not given back
        self._thread: threading.Thread | None = None
        self._r, self._w = os.pipe()
        for fd in (self._r, self._w):
            os.set_blocking(fd, False)

    @property
    def lent(self) -> int:
        """Runs ticked by the loop now (admitted or waiting to be)."""
        with self._lock:
            return len(self._lent) + len(self._incoming)

    def run(self, tick: Tick, waiter: ExitWaiter, due: float) -> None:
        """Tick in the shared thread from `due` (monotonic) on, until `tick` gives the run back (returns
        None) — then return — or raises: then raise that here, in the driver's thread."""
        lent = _Lent(tick, waiter, due)
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="watch-loop", daemon=True)
                self._thread.start()
            self._incoming.append(lent)
        self._poke()
        try:
            # Timed waits: a driver on a process's main thread must still see Ctrl-C, and an untimed wait
            # there never runs the signal handler when the kernel gave SIGINT to another thread.
            while not lent.done.wait(0.5):
                pass
        except BaseException:
            lent.withdrawn = True  # the loop gives it back before any further tick: one owner at a time
            self._poke()
            lent.done.wait(5.0)
            raise
        if lent.error is not None:
            raise lent.error

    # -- the loop's thread --------------------------------------------------------------------
    def _poke(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            os.write(self._w, b"!")

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            self._serve(sel)
        except Exception as exc:  # never leave a driver waiting on a dead loop: each gets the error
            log.exception("watch loop: stopped")
            with self._lock:
                self._thread = None  # the next run starts a new loop
                stranded, self._incoming = self._lent + self._incoming, []
                self._lent = []
            for lent in stranded:
                lent.waiter.selected = False
                lent.error = exc
                lent.done.set()
        finally:
            sel.close()

    def _serve(self, sel: selectors.BaseSelector) -> None:
        sel.register(self._r, selectors.EVENT_READ, None)
        while True:
            self._admit_incoming(sel)
            for key, _ in sel.select(self._timeout()):
                self._wake(key)
            for lent in [x for x in self._lent if x.withdrawn]:
                self._give_back(sel, lent)
            now = time.monotonic()
            for lent in [x for x in self._lent if x.due <= now]:
                self._tick(sel, lent)

    def _timeout(self) -> float | None:
        """Until the next lent run's tick is due; None (until a wake-up) when no run is lent."""
        if not self._lent:
            return None
        return max(0.0, min(x.due for x in self._lent) - time.monotonic())

    def _admit_incoming(self, sel: selectors.BaseSelector) -> None:
        """Take the runs lent since the last pass, one at a time, each on `_lent` first: a failure strands none."""
        while True:
            with self._lock:
                if not self._incoming:
                    return
                lent = self._incoming.pop(0)
                self._lent.append(lent)
            self._admit(sel, lent)

    def _wake(self, key: selectors.SelectorKey) -> None:
        """A ready fd: our own wake-up pipe, or a run whose process ended or whose stop was announced (it is
        ticked at once)."""
        if key.data is None:
            _drain(self._r)
            return
        key.data.due = 0.0
        if key.fd == key.data.waiter.pipe:
            key.data.waiter.drain()
        else:
            key.data.waiter.exited = True

    def _admit(self, sel: selectors.BaseSelector, lent: _Lent) -> None:
        try:
            for fd in lent.waiter.fds():
                sel.register(fd, selectors.EVENT_READ, lent)
        except (OSError, ValueError) as exc:  # a closed fd: the run is not quiet, its driver goes on
            log.warning("watch loop: could not take a run: %s", exc)
            self._give_back(sel, lent)
            return
        lent.waiter.selected = True

    def _tick(self, sel: selectors.BaseSelector, lent: _Lent) -> None:
        try:
            due = lent.context.run(lent.tick)
        except Exception as exc:  # noqa: BLE001 - raised again in the driver's thread, which owns the run
            lent.error = exc
            due = None
        if due is None:
            self._give_back(sel, lent)
        else:
            lent.due = due

    def _give_back(self, sel: selectors.BaseSelector, lent: _Lent) -> None:
        lent.waiter.selected = False
        for fd in lent.waiter.fds():
            with contextlib.suppress(KeyError, ValueError, OSError):
                sel.unregister(fd)
        with contextlib.suppress(ValueError):
            self._lent.remove(lent)
        lent.done.set()


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError, OSError):
        while os.read(fd, 4096):
            pass


LOOP = WatchLoop()  # the process's one
