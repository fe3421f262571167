"""Import matplotlib in the background, once per process, so the report's plot is quick.

A fresh RQ work-horse paid ~300 ms importing matplotlib between the command's exit and
`finish.flag`. The node's watcher (one process for all its runs) starts the import when it starts;
a driver run elsewhere (e.g. in the API's process) starts it when watching starts. Either way the
exit → report path never pays it.
"""

from __future__ import annotations

import threading

_started = threading.Lock()
_thread: threading.Thread | None = None


def _load() -> None:
    try:
        from io import BytesIO

        from matplotlib import ticker  # noqa: F401 - what workers/report.py uses
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        fig = Figure(figsize=(2, 1), dpi=50)  # one tiny render loads the fonts and the Agg renderer
        FigureCanvasAgg(fig)
        fig.subplots().set_title("warm-up")
        fig.savefig(BytesIO(), format="png")
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
