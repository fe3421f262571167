"""Writing the report files: the plot, `results.json`, then `experiment_report.md`."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ajet_runner.resultdir.confined import open_dir
from ajet_runner.resultdir.flag import atomic_write_text, remove_file
from ajet_runner.workers.report.data import PLOT_NAME, REPORT_NAME, RESULTS_NAME, ReportData
from ajet_runner.workers.report.evaluations import normalize_evaluations
from ajet_runner.workers.report.markdown import clean
from ajet_runner.workers.report.plot import Background, write_plot
from ajet_runner.workers.report.results_json import results_document
from ajet_runner.workers.report.sections import render_report


def write_report(data: ReportData, plot_background: Background | None = None) -> dict[str, Path]:
    """Write the plot (when there is something to draw), `results.json`, then `experiment_report.md`.
    `plot_background`: the plot drawn while the run was watched (used only if it shows exactly
    these evaluations).

    Returns the paths written, keyed "plot" (if drawn), "results", "report".
    """
    out_dir = Path(data.result_dir)
    os.close(open_dir(out_dir))  # created if missing, inside the allowed roots when confined
    now = time.time()
    evals = normalize_evaluations(data.evaluations)
    written: dict[str, Path] = {}
    plot_path = out_dir / PLOT_NAME
    try:
        plot_note = write_plot(plot_path, evals, f"{data.id}: {data.outcome or 'unknown'}", plot_background)
    except Exception as exc:  # noqa: BLE001 - matplotlib trouble must not cost the report
        plot_note = f"the plot could not be drawn ({type(exc).__name__}: {clean(exc)[:200]})"
    if plot_note:
        remove_file(plot_path)  # a stale plot from an earlier run would contradict the report
    else:
        written["plot"] = plot_path
    doc = results_document(data, evals, plot_written=not plot_note, now=now)
    text = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)
    written["results"] = atomic_write_text(out_dir / RESULTS_NAME, text + "\n")
    written["report"] = atomic_write_text(out_dir / REPORT_NAME, render_report(data, evals, plot_note, now))
    return written
