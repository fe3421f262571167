"""Import matplotlib in the background while a run is watched, so the report's plot is quick.

A fresh RQ work-horse paid ~300 ms importing matplotlib between the command's exit and
`finish.flag`. Importing it in the idle slot before the fork would make every idle slot carry
it (tens of MB each); importing it in a daemon thread when watching starts costs nothing on the
exit → report path and nothing while a slot waits for work. The warm-up draws on the reused
figure of `workers/report/plot.py`, so the first real plot does not build it either.
"""

from __future__ import annotations

import threading

_started = threading.Lock()
_thread: threading.Thread | None = None


def _load() -> None:
    try:
        from workers.report.evaluations import Eval
        from workers.report.plot import render_png

        # One drawing on the process's reused figure: imports matplotlib and PIL, loads the fonts,
        # creates the panels' ticks; the report's plot then only draws.
        render_png([Eval(step=0, dataset="", metrics={"mean_reward": 0.0, "task_pass_rate@1": 0.0})], "warm-up")
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
