"""Writing the report files: the plot, `results.json`, then `experiment_report.md`.

The driver's end of a run (result_files.finish_result_dir) writes the texts first and draws the plot
after `finish.flag` (`write_texts`, then `draw_plot`): drawing is ~0.4 s of matplotlib on a loaded
node, and the flag is what people wait for."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ajet_runner.resultdir.confined import open_dir
from ajet_runner.resultdir.flag import atomic_write_text, remove_file
from ajet_runner.workers.report.data import PLOT_NAME, REPORT_NAME, RESULTS_NAME, ReportData
from ajet_runner.workers.report.evaluations import Eval, normalize_evaluations
from ajet_runner.workers.report.markdown import clean
from ajet_runner.workers.report.plot import Background, nothing_to_plot, write_plot
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
    evals = normalize_evaluations(data.evaluations)
    plot_note = draw_plot(data, evals, plot_background)
    written = {"plot": out_dir / PLOT_NAME} if not plot_note else {}
    return {**written, **write_texts(data, evals, plot_note)}


def draw_plot(data: ReportData, evals: list[Eval], background: Background | None = None) -> str:
    """Draw `plot.png`; "" when drawn, else why not (and no stale plot of an earlier run is left)."""
    plot_path = Path(data.result_dir) / PLOT_NAME
    try:
        plot_note = write_plot(plot_path, evals, f"{data.id}: {data.outcome or 'unknown'}", background)
    except Exception as exc:  # noqa: BLE001 - matplotlib trouble must not cost the report
        plot_note = f"the plot could not be drawn ({type(exc).__name__}: {clean(exc)[:200]})"
    if plot_note:
        remove_file(plot_path)  # a stale plot from an earlier run would contradict the report
    return plot_note


def write_texts(data: ReportData, evals: list[Eval], plot_note: str) -> dict[str, Path]:
    """`results.json` and `experiment_report.md`, saying the plot is there unless `plot_note` says why not."""
    out_dir = Path(data.result_dir)
    os.close(open_dir(out_dir))  # created if missing, inside the allowed roots when confined
    now = time.time()
    doc = results_document(data, evals, plot_written=not plot_note, now=now)
    text = json.dumps(doc, indent=2, ensure_ascii=False, allow_nan=False)
    return {"results": atomic_write_text(out_dir / RESULTS_NAME, text + "\n"),
            "report": atomic_write_text(out_dir / REPORT_NAME, render_report(data, evals, plot_note, now))}


def plan_plot(data: ReportData) -> tuple[list[Eval], str]:
    """The evaluations the report shows and why they make no plot ("" when a plot is to be drawn); a
    stale plot.png is removed at once when none will be."""
    evals = normalize_evaluations(data.evaluations)
    note = nothing_to_plot(evals)
    if note:
        remove_file(Path(data.result_dir) / PLOT_NAME)
    return evals, note
