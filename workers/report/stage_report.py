"""The stage report a research lead decides the next stage from: `stage_report.md`, `stage_results.json`,
`stage_plot.png`, rendered from a comparison (statemachine/comparison/compare.py).

Rendering never raises on odd data (a value that cannot be shown reads "n/a"); I/O errors propagate, so
the caller (the `compare` command, or the deliverer writing it when a stage finishes) can say so.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from ajet_runner.resultdir.confined import open_dir
from ajet_runner.resultdir.flag import atomic_write_text, iso_utc, remove_file
from ajet_runner.resultdir.stage_series import TOP_N
from ajet_runner.statemachine.comparison.compare import Ranked, Row, StageComparison
from ajet_runner.statemachine.lifecycle import FINISHED
from ajet_runner.workers.report.markdown import code_span, fmt_duration, fmt_value, md_cell, table
from ajet_runner.workers.report.stage_plot import STAGE_PLOT_NAME, write_stage_plot

__all__ = ["STAGE_PLOT_NAME", "STAGE_REPORT_NAME", "STAGE_RESULTS_NAME", "render_stage_report",
           "write_stage_report"]

STAGE_REPORT_NAME = "stage_report.md"
STAGE_RESULTS_NAME = "stage_results.json"
STAGE_REPORT_VERSION = 1
PURPOSE_CHARS = 80
RANKING_KEYS = 4  # differing keys repeated in the ranking tables
INDENTED_ROWS = 20  # stage_results.json is indented up to this many experiments


def _link(path: str, base: str, text: str) -> str:
    if not path:
        return "n/a"
    try:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    except ValueError:
        return code_span(path)
    return f"[{text}](<{rel}>)"


def _metric_cell(mv: Any, which: str) -> str:
    if mv is None:
        return "n/a"
    value, step = getattr(mv, which), getattr(mv, f"{which}_step")
    if value is None:
        return "n/a"
    return f"{fmt_value(value)}" + (f" @{step}" if step is not None else "")


def _purpose(text: str) -> str:
    first = (text.strip().splitlines() or [""])[0]
    return md_cell(first, PURPOSE_CHARS) or "n/a"


def _outcome(row: Any) -> str:
    return row.outcome if row.state == FINISHED else f"{row.state} (not finished)"


def _plus_minus(mean: float | None, std: float | None) -> str:
    return "n/a" if mean is None else f"{fmt_value(mean)} ± {fmt_value(std or 0.0)}"


def _range(low: float | None, high: float | None) -> str:
    return "n/a" if low is None or high is None else f"{fmt_value(low)} – {fmt_value(high)}"


def _key_values(c: StageComparison, key: str) -> str:
    """The distinct values one key took across the stage's experiments, in order."""
    return ", ".join(code_span(v) for v in dict.fromkeys(r.differs.get(key, "n/a") for r in c.rows))


def _differences(c: StageComparison) -> list[str]:
    """One line per differing key (seeds marked) and one for the launch command."""
    lines: list[str] = []
    if not c.differing_keys and not c.command_differs:
        lines.append("Nothing: every experiment was given the same YAML values and the same launch command"
                     + (" (as far as could be read here)." if c.unknown_config or c.unknown_command else "."))
    lines += [f"- {code_span(key)}: {_key_values(c, key)}" for key in c.compared_keys]
    lines += [f"- {code_span(key)} (a seed: experiments that differ only in it are repeats): {_key_values(c, key)}"
              for key in c.seed_keys]
    if c.command_differs:
        lines.append("- the launch command: its differing part is in the table below")
    elif not c.unknown_command:
        lines.append("- the launch command is the same for every experiment")
    return lines


def _differs_section(c: StageComparison) -> list[str]:
    lines = ["## What differs", "", *_differences(c)]
    lines += ["", "Compared: each experiment's YAML as it was given (`config.original.yaml` in its result dir) with "
              "its sweep values. The runner's own changes — results files and checkpoint dirs in the result dir, "
              "each experiment's own name, its preflight fixes — are the same rule for every experiment and are "
              "left out; a repair made during a run is counted in its row and described in its repair log."]
    if c.unknown_config:
        unread = ", ".join(code_span(i) for i in c.unknown_config)
        lines.append(f"The YAML of {unread} could not be read here (not launched yet, or its result dir is not "
                     "visible): only its sweep values are compared.")
    return lines


def _verdicts(c: StageComparison) -> list[str]:
    """One line per compared key: the best value and whether it stands out of the seed noise."""
    lines = [f"## Verdicts (final {c.metric})", ""]
    if not c.verdicts:
        return [*lines, "No key is compared (nothing but seeds differs)."]
    noise = (f"Seed noise: the standard deviation of the final {c.metric} across seeds is "
             f"{fmt_value(c.seed_noise)}; a difference under two standard errors of it is within noise."
             if c.seed_noise is not None else "No repeated seeds: the seed noise is unknown, so no difference can be "
             "called beyond it.")
    return [*lines, *(f"- {md_cell(v.text, 400)}" for v in c.verdicts), "", noise]


def _experiments_table(c: StageComparison, base: str) -> list[str]:
    keys = c.differing_keys
    header = ["#", "run (what differs)", "id", "purpose", "outcome", "attempts", "repairs", "elapsed", "steps", *keys]
    if c.command_differs:
        header.append("launch command (differing part)")
    header += ["report", "repair log"]
    rows = []
    for n, r in enumerate(c.rows, start=1):
        repairs = str(r.repairs) + (f" ({', '.join(dict.fromkeys(r.repair_signatures))})" if r.repairs else "")
        cells = [str(n), md_cell(r.label) or "n/a", code_span(r.id), _purpose(r.purpose), _outcome(r), str(r.attempts),
                 md_cell(repairs),
                 fmt_duration(r.elapsed_seconds), str(r.train_steps) if r.source == "results.json" else "n/a",
                 *(code_span(r.differs.get(k, "n/a")) for k in keys)]
        if c.command_differs:
            cells.append(code_span(r.command_part or "n/a"))
        cells += [_link(r.report_path, base, "report"), _link(r.repair_log_path, base, "repair log")]
        rows.append(cells)
    return ["## Experiments", "", *table(header, rows)]


def _metrics_table(c: StageComparison) -> list[str]:
    if not c.metrics:
        return ["## Validation metrics", "", "No experiment recorded a validation metric."]
    header = ["id", *(f"{m} final / best" for m in c.metrics)]
    rows = [[code_span(r.id), *(f"{_metric_cell(r.metrics.get(m), 'final')} / {_metric_cell(r.metrics.get(m), 'best')}"
                                for m in c.metrics)] for r in c.rows]
    return ["## Validation metrics", "", "Final: the last evaluation; best: the best over the run; `@N` is the step.",
            "", *table(header, rows)]


def _ranking(c: StageComparison) -> list[str]:
    lines = [f"## Ranking by {c.metric}", ""]
    keys = (c.compared_keys + c.seed_keys)[:RANKING_KEYS]
    if len(c.differing_keys) > len(keys):
        lines += [f"(The first {len(keys)} of the {len(c.differing_keys)} differing keys; the Experiments table has "
                  "them all.)", ""]
    by_id = {r.id: r for r in c.rows}
    for title, ranked in (("final value", c.ranking_final), ("best value", c.ranking_best)):
        rows = [_ranking_row(c, item, by_id[item.id], keys) for item in ranked]
        lines += [f"By {title} (`=N`: tied with another run at the shown precision):", "",
                  *table(["rank", "id", *keys, "outcome", c.metric, "step"], rows), ""]
    return lines + _repeats(c)


def _ranking_row(c: StageComparison, item: Ranked, row: Row, keys: list[str]) -> list[str]:
    rank = "–" if item.rank is None else f"={item.rank}" if item.tied else str(item.rank)
    return [rank, code_span(item.id),
            *(code_span(row.differs.get(k, "n/a")) for k in keys), _outcome(row),
            fmt_value(item.value) if item.value is not None else f"no {c.metric} recorded",
            str(item.step) if item.step is not None else "n/a"]


def _repeats(c: StageComparison) -> list[str]:
    """The repeat groups (runs that differ only in their seeds): mean ± sd and range of the final and best."""
    if not c.repeat_groups:
        return []
    lines = [f"Repeats (experiments that differ only in {', '.join(code_span(k) for k in c.seed_keys)}), "
             f"best group first:", ""]
    rows = [[md_cell(g.label), ", ".join(code_span(m) for m in g.members), str(g.counted),
             _plus_minus(g.final_mean, g.final_std), _range(g.final_min, g.final_max),
             _plus_minus(g.best_mean, g.best_std), _range(g.best_min, g.best_max)] for g in c.repeat_groups]
    lines += table(["shared values", "experiments", "with a value", f"final {c.metric} mean ± sd", "range",
                    f"best {c.metric} mean ± sd", "range"], rows)
    return [*lines, ""]


def _not_succeeded(c: StageComparison, base: str) -> list[str]:
    lines = ["## Did not succeed", ""]
    failed = [r for r in c.rows if not r.succeeded]
    if not failed:
        return [*lines, "Every experiment completed or early-stopped."]
    for r in failed:
        if r.state != FINISHED:
            lines.append(f"- {code_span(r.id)}: still {r.state} when this report was written")
            continue
        decisive = r.decisive or "the runner recorded no decisive log line"
        lines.append(f"- {code_span(r.id)} ({r.outcome}): {md_cell(decisive, 400)} — "
                     f"{_link(r.report_path, base, 'report')}, {_link(r.repair_log_path, base, 'repair log')}")
    return lines


def render_stage_report(c: StageComparison, base: str, plot_written: bool, now: float, no_plot: str = "") -> str:
    """The markdown, with links relative to `base` (where it is written); `no_plot`: why a plot of the curves
    there are was not drawn (a client-only install)."""
    done = sum(1 for r in c.rows if r.succeeded)
    lines = [f"# Stage {c.stage}", "",
             f"{len(c.rows)} experiment(s); {done} completed or early-stopped, {len(c.rows) - done} did not"
             f"{' (listed below with their decisive line)' if done < len(c.rows) else ''}. Generated {iso_utc(now)}.",
             ""]
    lines += [*_differs_section(c), "", *_verdicts(c), "", *_experiments_table(c, base), "", *_metrics_table(c), "",
              *_ranking(c)]
    lines += ["## Curves", ""]
    if plot_written:
        grouped = " Runs that differ only in their seed are one curve: their mean, with a band from the lowest " \
                  "to the highest." if c.group_curves else ""
        lines += [f"![the stage's curves]({STAGE_PLOT_NAME})", "",
                  f"The best {TOP_N} curves by final value are in colour, named by what differs; the rest share "
                  f"one grey band.{grouped} Every run's values are in the tables above."]
    elif no_plot:
        lines.append(f"No plot: {no_plot}. Every run's values are in the tables above.")
    else:
        lines.append("No experiment has a curve yet (no evaluation with a step was recorded).")
    lines += ["", *_not_succeeded(c, base), ""]
    return "\n".join(lines)


def stage_document(c: StageComparison, base: str, plot_written: bool, now: float) -> dict[str, Any]:
    # pydantic-core writes the JSON (non-finite floats as null, as json_safe does) and json's C decoder reads it:
    # a tenth of model_dump + json_safe's time, which walked every point of every curve in Python.
    doc = {"report_version": STAGE_REPORT_VERSION, "generated_at": iso_utc(now), "generated_at_epoch": now,
           **json.loads(c.model_dump_json()),
           "files": {"report": STAGE_REPORT_NAME, "results": STAGE_RESULTS_NAME,
                     "plot": STAGE_PLOT_NAME if plot_written else None}}
    for row in doc["rows"]:
        for name in ("report_path", "repair_log_path"):
            if row.get(name):
                row[name.replace("_path", "_link")] = os.path.relpath(os.path.abspath(row[name]), os.path.abspath(base))
    return doc


def write_stage_report(out_dir: str | Path, c: StageComparison, notes: list[str] | None = None) -> dict[str, Path]:
    """Write the plot (when there is a curve), `stage_results.json`, then `stage_report.md` into `out_dir`
    (created if missing, inside the allowed roots when confined). Returns the paths written; why a plot of
    existing curves was not drawn is appended to `notes` (and said in the report)."""
    out = Path(out_dir)
    os.close(open_dir(out))
    now = time.time()
    written: dict[str, Path] = {}
    plot = out / STAGE_PLOT_NAME
    no_plot = ""
    try:
        drawn = write_stage_plot(plot, c)
    except ModuleNotFoundError as exc:  # a client-only install (`compare` on a laptop): the plots are [node]'s
        from ajet_runner.workers.report.plot import missing_plotting

        drawn, no_plot = False, missing_plotting(exc)
    except Exception:  # noqa: BLE001 - matplotlib trouble must not cost the report
        drawn = False
    if no_plot and notes is not None:
        notes.append(no_plot)
    if drawn:
        written["plot"] = plot
    else:
        remove_file(plot)  # a stale plot would contradict the report
    # Indented for a person up to INDENTED_ROWS runs; larger ones compact (json's C encoder: indenting forces the
    # pure-Python one, seconds for a 200-run stage's curves).
    indent = 2 if len(c.rows) <= INDENTED_ROWS else None
    text = json.dumps(stage_document(c, str(out), drawn, now), indent=indent, ensure_ascii=False, allow_nan=False)
    written["results"] = atomic_write_text(out / STAGE_RESULTS_NAME, text + "\n")
    written["report"] = atomic_write_text(out / STAGE_REPORT_NAME, render_stage_report(c, str(out), drawn, now,
                                                                                  no_plot))
    return written
