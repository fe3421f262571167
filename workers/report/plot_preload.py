"""Import matplotlib in the background, once per process, so the report's plot is quick.

A fresh RQ work-horse paid ~300 ms importing matplotlib between the command's exit and
`finish.flag`. Each driver starts the import (once per process: the node's watcher, or e.g. the API's
process) when its watch starts, not the watcher at its own start, where it delayed a restarted node's
re-adoptions (issue 39). Either way the exit → report path never pays it. The warm-up draws on the reused figure of
`workers/report/plot.py`, so the first real plot does not build it either.

`PlotAhead` goes further: it draws the plot while the run is watched, when the evaluations change,
so that collecting only adds the title to that drawing (~20 ms instead of ~60) — or draws in full, as
before, when the evaluations changed after the last drawing. At most one drawing starts per
`min_interval` (20 s): each costs ~70 ms of CPU, and a run that evaluates every few seconds (the
simulated trainer, a smoke test) paid ~0.45 CPU-s per run for drawings that only the last one is used of,
to save ~40 ms once. An update inside the interval is dropped before any work (it runs on the watch
loop); evaluations only grow, so the next update after the interval carries it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from ajet_runner.workers.report import normalize_evaluations
from ajet_runner.workers.report.plot import Background, draw_background, plot_points

_started = threading.Lock()
_thread: threading.Thread | None = None


def _load() -> None:
    try:
        from ajet_runner.statemachine.metric_vocabulary import PLATEAU_METRICS
        from ajet_runner.workers.report.evaluations import Eval
        from ajet_runner.workers.report.plot import render_png

        # One drawing on the process's reused figure: imports matplotlib and PIL, loads the fonts,
        # creates the panels' ticks; the report's plot then only draws.
        render_png([Eval(step=0, dataset="", metrics=dict.fromkeys(PLATEAU_METRICS, 0.0))], "warm-up")
    except Exception:  # noqa: BLE001 - a broken matplotlib is reported when the plot is drawn
        return


def preload_plotting() -> threading.Thread:
    """Start the import once per process (later calls return the same thread)."""
    global _thread
    with _started:
        if _thread is None:
            _thread = threading.Thread(target=_load, name="plot-preload", daemon=True)
            _thread.start()
        return _thread


class PlotAhead:
    """The report's plot of one run, drawn (without its title) in a daemon thread when its evaluations
    change: one drawing at a time and at most one start per `min_interval`; the newest evaluations win."""

    def __init__(self, min_interval: float = 20.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._lock = threading.Lock()
        self._next: list[Any] | None = None
        self._thread: threading.Thread | None = None
        self._background: Background | None = None
        self._min_interval = min_interval
        self._clock = clock
        self._last_start: float | None = None

    def _due(self) -> bool:
        return self._last_start is None or self._clock() - self._last_start >= self._min_interval

    def update(self, evaluations: list[Any]) -> None:
        """`evaluations` as the report gets them (each an `Evaluation`, in its stored form).
        Never raises: drawing ahead is an optimisation, the watch loop must not depend on it."""
        with self._lock:
            if not self._due():
                return
        try:
            points = plot_points(normalize_evaluations([e.to_json() for e in evaluations]))
        except Exception:  # noqa: BLE001 - collecting draws the plot in full
            return
        if not points:
            return
        with self._lock:
            self._next = points
            if self._thread is None and self._due():
                self._thread = threading.Thread(target=self._run, name="plot-ahead", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                points, self._next = self._next, None
                if points is None:
                    self._thread = None
                    return
                self._last_start = self._clock()
            try:
                background: Background | None = draw_background(points)
            except Exception:  # noqa: BLE001 - the full drawing at the end says what is wrong
                background = None
            with self._lock:
                self._background = background

    def background(self, timeout: float = 5.0) -> Background | None:
        """The latest drawing, once the one under way (if any) is done."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
        with self._lock:
            return self._background
