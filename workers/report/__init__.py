"""The experiment report a user opens first: `experiment_report.md`, `results.json`, `reward_plot.png`.

The driver hands over plain data (:class:`ReportData`); this package only renders it, one module per
job: `data` (what is shown, file names), `markdown` (formatting), `evaluations` (normalised rows,
baselines), `plot`, `render` (the markdown report), `results_json`, `write` (writing them). A
report is written once a run is over, often after something went wrong, so rendering never raises
on odd data (NaN, missing keys, empty lists, unexpected shapes): what cannot be shown reads "n/a",
and a section that fails to render says so instead of taking the whole report down. I/O errors (an
unwritable result dir) do propagate.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ajet_runner.workers.report.data import (
        NA,
        PLOT_NAME,
        REPAIR_LOG_NAME,
        REPORT_NAME,
        REPORT_VERSION,
        RESULTS_NAME,
        AttemptInfo,
        RepairRecord,
        ReportData,
    )
    from ajet_runner.workers.report.evaluations import Eval, changes_since_baseline, normalize_evaluations
    from ajet_runner.workers.report.markdown import (
        clean,
        code_span,
        fenced,
        finite,
        fmt_duration,
        fmt_time,
        fmt_value,
        md_cell,
        number,
        path_link,
        table,
    )
    from ajet_runner.workers.report.plot import write_plot
    from ajet_runner.workers.report.results_json import json_safe, results_document
    from ajet_runner.workers.report.sections import render_report, repair_next, repair_summary
    from ajet_runner.workers.report.write import write_report

# Each name's module: the names are imported at their first use, so importing one module of the package (the stage
# plot in `compare`, the plot preload) does not load the report's data model and, through it, the store's records.
_WHERE = {
    **dict.fromkeys(("NA", "PLOT_NAME", "REPAIR_LOG_NAME", "REPORT_NAME", "REPORT_VERSION", "RESULTS_NAME",
                     "AttemptInfo", "RepairRecord", "ReportData"), "data"),
    **dict.fromkeys(("Eval", "changes_since_baseline", "normalize_evaluations"), "evaluations"),
    **dict.fromkeys(("clean", "code_span", "fenced", "finite", "fmt_duration", "fmt_time", "fmt_value", "md_cell",
                     "number", "path_link", "table"), "markdown"),
    "write_plot": "plot",
    **dict.fromkeys(("json_safe", "results_document"), "results_json"),
    **dict.fromkeys(("render_report", "repair_next", "repair_summary"), "sections"),
    "write_report": "write",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "NA", "PLOT_NAME", "REPAIR_LOG_NAME", "REPORT_NAME", "REPORT_VERSION", "RESULTS_NAME", "AttemptInfo", "Eval",
    "RepairRecord", "ReportData", "changes_since_baseline", "clean", "code_span", "fenced", "finite", "fmt_duration",
    "fmt_time", "fmt_value", "json_safe", "md_cell", "normalize_evaluations", "number", "path_link", "render_report",
    "repair_next", "repair_summary", "results_document", "table", "write_plot", "write_report",
]
