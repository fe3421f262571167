"""The experiment report a user opens first: `experiment_report.md`, `results.json`, `reward_plot.png`.

The driver hands over plain data (:class:`ReportData`); this module only renders it. A
report is written once a run is over, often after something went wrong, so rendering
never raises on odd data (NaN, missing keys, empty lists, unexpected shapes): what
cannot be shown reads "n/a", and a section that fails to render says so instead of
taking the whole report down. I/O errors (an unwritable result dir) do propagate.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from enum import Enum
from io import BytesIO
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator

from resultdir.roots import open_dir
from workers.finish import atomic_write_bytes, atomic_write_text, iso_utc, remove_file

REPORT_VERSION = 1
REPORT_NAME = "experiment_report.md"
RESULTS_NAME = "results.json"
PLOT_NAME = "reward_plot.png"
REPAIR_LOG_NAME = "repair_log.md"
NA = "n/a"
LOG_TAIL_LINES = 200
CELL_CHARS = 300

COUNT_METRICS = ("num_all_success_tasks", "num_pass_n_tasks", "total_tasks", "pass_n")
DELTA_METRICS = ("mean_reward", "task_pass_rate@1")
_RATE_RE = re.compile(r"^task_pass_rate@(\d+)$")
_KEY_SUFFIX_RE = re.compile(r"\s*\([^()]*\)\s*$")
_PIPE_RE = re.compile(r"(?<!\\)\|")
_CONTROL_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")


# ----------------------------------------------------------------------------- inputs


def _plain(value: Any) -> Any:
    """Enums → values, models → dicts, so the driver may pass statemachine objects as they are."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, BaseModel):
        return _plain(value.model_dump())
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class _Input(BaseModel):
    model_config = ConfigDict(extra="ignore")

    @field_validator("*", mode="before")
    @classmethod
    def _coerce(cls, value: Any) -> Any:
        return _plain(value)


class AttemptInfo(_Input):
    """One launch of the command."""

    number: int
    started_at: float
    ended_at: float | None = None
    exit_code: int | None = None
    command: str = ""
    log_path: str = ""
    end_reason: str = ""


class RepairRecord(_Input):
    """One failure and what the runner did about it (the driver may fill `next` later)."""

    at: float
    attempt: int
    signature: str = "unknown"
    explanation: str = ""
    log_excerpt: str = ""
    changes: list[str] = []
    diff: str = ""
    source: str = "none"
    result: str = ""
    next: str = ""
    # Only when source == "adviser": who advised, why, what it proposed and what became of it.
    advised_by: str = ""
    advice_result: str = ""  # advised | refused | declined | no answer
    advice_diagnosis: str = ""
    rationale: str = ""
    advice: list[str] = []
    advice_changes: list[dict[str, Any]] = []
    refused: list[str] = []
    advice_seconds: float | None = None
    signature_text: str = ""
    suggestion: str = ""


class ReportData(_Input):
    """Everything the report shows; `results.json` holds exactly this plus computed fields."""

    id: str
    purpose: str = ""
    node: str = ""
    tmux_session: str = ""
    tmux_socket: str = ""
    outcome: str = ""
    reason: str = ""
    created_at: float | None = None
    started_at: float | None = None
    finished_at: float | None = None
    max_seconds: float | None = None
    result_dir: str
    blueprint_path: str = ""
    yaml_path: str = ""
    patched_yaml_path: str = ""
    attempts: list[AttemptInfo] = []
    preflight_changes: list[dict[str, Any]] = []
    preflight_problems: list[dict[str, Any]] = []
    repairs: list[RepairRecord] = []
    evaluations: list[dict[str, Any]] = []
    final: dict[str, Any] = {}
    best: dict[str, Any] = {}
    train_steps: int = 0
    log_tail: list[str] = []
    history: list[dict[str, Any]] = []
    preflight_env: dict[str, Any] = {}  # {"environment", "decisions": [{"variable", "is_set", "decision"}]}
    results_source: str = ""  # where the evaluations came from (file, bytes after launch, console log)
    previous_run: str = ""  # an earlier run's files, moved aside (relative to the result dir)

    @field_validator("final", "best", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else _plain(value)

    @field_validator("evaluations", "history", "preflight_changes", "preflight_problems", mode="before")
    @classmethod
    def _dicts_only(cls, value: Any) -> Any:
        """Items that are not mappings carry nothing renderable; drop them rather than refuse the report."""
        if value is None:
            return []
        value = _plain(value)
        return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else value


# ----------------------------------------------------------------------------- formatting


def number(value: Any) -> float | None:
    """A metric value as float (NaN/inf kept), or None when it is not a number at all."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).strip().rstrip("%"))
    except ValueError:
        return None


def finite(value: Any) -> float | None:
    x = number(value)
    return x if x is not None and math.isfinite(x) else None


def fmt_value(value: Any, metric: str = "") -> str:
    """A metric for a person: counts as integers, rates and rewards with 4 decimals, else n/a."""
    x = finite(value)
    if x is None:
        return NA
    if metric.startswith(COUNT_METRICS) and x == int(x):
        return str(int(x))
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.4g}"
    return f"{x:.4f}"


def fmt_delta(value: float | None) -> str:
    return NA if value is None else f"{value:+.4f}"


def fmt_time(value: Any) -> str:
    """Epoch seconds as `YYYY-MM-DD HH:MM:SS UTC`; strings are shown as they are."""
    if isinstance(value, str) and number(value) is None:
        return value or NA
    x = finite(value)
    if x is None:
        return NA
    try:
        return datetime.fromtimestamp(x, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return NA


def fmt_duration(seconds: Any) -> str:
    """`42 s`, `5 min 03 s`, `2 h 05 min`, `1 d 03 h 05 min`."""
    x = finite(seconds)
    if x is None or x < 0:
        return NA
    s = int(round(x))
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if d:
        return f"{d} d {h:02d} h {m:02d} min"
    if h:
        return f"{h} h {m:02d} min"
    if m:
        return f"{m} min {sec:02d} s"
    return f"{sec} s"


def clean(text: Any) -> str:
    """Text without terminal escapes or control characters (newlines and tabs kept)."""
    return _CONTROL_RE.sub("", str(text)) if text is not None else ""


def md_cell(value: Any, limit: int = CELL_CHARS) -> str:
    """Text for one line (a table cell or a list item): whitespace collapsed, long text shortened."""
    text = " ".join(clean(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def code_span(value: Any) -> str:
    """Inline code that survives backticks inside the text."""
    text = " ".join(clean(value).split())
    if not text:
        return NA
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fenced(text: str, lang: str = "text") -> list[str]:
    """A fenced block whose fence is longer than any backtick run inside it."""
    body = clean(text).rstrip("\n")
    ticks = "`" * max(3, max((len(r) for r in re.findall(r"`{3,}", body)), default=0) + 1)
    return [f"{ticks}{lang}", *body.split("\n"), ticks]


def _cell(markdown: Any) -> str:
    """Pipes escaped (GFM un-escapes them inside code spans in tables too); never empty."""
    return _PIPE_RE.sub(r"\\|", str(markdown)) if markdown not in (None, "") else " "


def table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    """A GFM table from cells that are already markdown (one line each)."""
    lines = ["| " + " | ".join(_cell(md_cell(h)) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def path_link(path: str, base: str) -> str:
    """A relative markdown link when `path` is inside `base` (the result dir), else the path as code."""
    if not path:
        return NA
    try:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    except ValueError:
        rel = ""
    if rel and not rel.startswith(".."):
        return f"[{md_cell(rel)}](<{rel}>)"
    return code_span(path)


# ----------------------------------------------------------------------------- evaluations


@dataclass
class Eval:
    """One evaluation, normalised: metric keys without `(pass@4)` suffixes, values as floats or None."""

    step: int | None
    dataset: str
    metrics: dict[str, float | None] = field(default_factory=dict)

    def get(self, metric: str) -> float | None:
        return finite(self.metrics.get(metric))


def _as_int(value: Any) -> int | None:
    x = finite(value)
    return int(x) if x is not None else None


def normalize_evaluations(raw: Iterable[Any]) -> list[Eval]:
    """Whatever the driver passed → sorted :class:`Eval` rows (rows that are not dicts are dropped)."""
    out: list[Eval] = []
    for item in raw or []:
        item = _plain(item)
        if not isinstance(item, dict):
            continue
        metrics_raw = item.get("metrics")
        if not isinstance(metrics_raw, dict):  # a flat dict: every other numeric key is a metric
            metrics_raw = {k: v for k, v in item.items() if k not in ("step", "dataset")}
        metrics: dict[str, float | None] = {}
        for key, value in metrics_raw.items():
            name = _KEY_SUFFIX_RE.sub("", str(key)).strip() or str(key)
            if name not in metrics and number(value) is not None:
                metrics[name] = number(value)
        step = _as_int(item.get("step", item.get("global_steps")))
        out.append(Eval(step=step, dataset=str(item.get("dataset") or ""), metrics=metrics))
    return sorted(out, key=lambda e: (e.step is None, e.step or 0))


def rate_metrics(evals: list[Eval]) -> list[str]:
    """`task_pass_rate@k` names present, by k."""
    names = {m for e in evals for m in e.metrics if _RATE_RE.match(m)}
    return sorted(names, key=lambda m: int(_RATE_RE.match(m).group(1)))  # type: ignore[union-attr]


def table_metrics(evals: list[Eval]) -> list[str]:
    present = {m for e in evals for m in e.metrics}
    wanted = ["mean_reward", "std_reward", *rate_metrics(evals), *COUNT_METRICS[:3]]
    chosen = [m for m in wanted if m in present]
    if not chosen:  # only unusual keys (e.g. val-core/...): show a few of them rather than nothing
        chosen = sorted(present)[:4]
    return chosen


def baselines(evals: list[Eval]) -> dict[str, Eval]:
    """Per dataset: its step-0 evaluation, else its first one."""
    base: dict[str, Eval] = {}
    for e in evals:
        current = base.get(e.dataset)
        if current is None or (e.step == 0 and current.step != 0):
            base[e.dataset] = e
    return base


def delta(e: Eval, base: Eval | None, metric: str) -> float | None:
    if base is None:
        return None
    now, then = e.get(metric), base.get(metric)
    return None if now is None or then is None else now - then


def changes_since_baseline(evals: list[Eval]) -> dict[str, dict[str, dict[str, Any]]]:
    """Per dataset and delta metric: baseline value/step → latest value/step and the change."""
    base = baselines(evals)
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for dataset, b in base.items():
        last = [e for e in evals if e.dataset == dataset][-1]
        for metric in DELTA_METRICS:
            if metric not in b.metrics and metric not in last.metrics:
                continue
            out.setdefault(dataset, {})[metric] = {
                "from_step": b.step,
                "from": b.get(metric),
                "to_step": last.step,
                "to": last.get(metric),
                "change": delta(last, b, metric),
            }
    return out


# ----------------------------------------------------------------------------- plot


def write_plot(path: Path, evals: list[Eval], title: str) -> str:
    """Draw mean_reward and task_pass_rate@k over steps; return "" or why nothing was drawn."""
    points = [e for e in evals if e.step is not None]
    if not points:
        return "no evaluation with a step was recorded"
    rates = rate_metrics(points)
    datasets = list(dict.fromkeys(e.dataset for e in points))
    if not any(e.get(m) is not None for e in points for m in ("mean_reward", *rates)):
        return "no finite mean_reward or task_pass_rate value was recorded"

    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib is slow to import
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(12, 4.8), dpi=100)  # fixed margins: "constrained" layout cost ~60 ms per plot
    FigureCanvasAgg(fig)
    ax_reward, ax_rate = fig.subplots(1, 2)
    colors = [f"C{i % 10}" for i in range(len(datasets))]
    steps = sorted({e.step for e in points if e.step is not None})
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]

    def series(dataset: str, metric: str) -> tuple[list[int], list[float]]:
        pairs = [(e.step, e.get(metric)) for e in points if e.dataset == dataset]
        kept = [(s, v) for s, v in pairs if s is not None and v is not None]
        return [s for s, _ in kept], [v for _, v in kept]

    for color, dataset in zip(colors, datasets, strict=True):
        xs, ys = series(dataset, "mean_reward")
        if xs:
            ax_reward.plot(xs, ys, marker="o", color=color, label=dataset or "mean_reward")
        for i, metric in enumerate(rates):
            xs, ys = series(dataset, metric)
            if xs:
                label = metric if len(datasets) == 1 else f"{metric} ({dataset or 'default'})"
                ax_rate.plot(xs, ys, marker=markers[i % len(markers)], color=color, label=label,
                             alpha=1.0 - 0.5 * i / max(1, len(rates)))
    for ax, name in ((ax_reward, "mean_reward"), (ax_rate, "task_pass_rate@k")):
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if len(steps) == 1:  # one evaluation: show it in a sensible window, not ±0.05 of a step
            ax.set_xlim(steps[0] - 1, steps[0] + 1)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, f"no {name} recorded", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(title)
    fig.subplots_adjust(left=0.05, right=0.985, top=0.85, bottom=0.11, wspace=0.14)
    buf = BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(path, buf.getvalue())
    return ""


# ----------------------------------------------------------------------------- report sections


@dataclass
class _Ctx:
    data: ReportData
    evals: list[Eval]
    now: float
    plot_note: str  # "" when the plot was written

    @property
    def elapsed(self) -> float | None:
        start = finite(self.data.started_at)
        end = finite(self.data.finished_at)
        if start is None:
            return None
        return (end if end is not None else self.now) - start


def _summary(c: _Ctx) -> list[str]:
    d = c.data
    lines: list[str] = []
    if d.purpose.strip():
        lines += [f"> {clean(line)}".rstrip() for line in d.purpose.strip().splitlines()] + [""]
    outcome = f"**{md_cell(d.outcome or 'unknown')}**" + (f" — {md_cell(d.reason, 600)}" if d.reason else "")
    if d.tmux_session:
        sock = f"-S {d.tmux_socket} " if d.tmux_socket else ""
        where = f" on {md_cell(d.node)}" if d.node else ""
        tmux = f"{code_span(d.tmux_session)} (attach{where}: {code_span(f'tmux {sock}attach -t {d.tmux_session}')})"
    else:
        tmux = NA
    if d.started_at is None:
        elapsed = "never launched"
    else:
        elapsed = fmt_duration(c.elapsed) + ("" if d.finished_at is not None else " (not finished)")
    limit = fmt_duration(d.max_seconds) if d.max_seconds else "none"
    used = finite(c.elapsed)
    if used is not None and finite(d.max_seconds):
        limit += f" ({100 * used / float(d.max_seconds):.0f}% used)"  # type: ignore[arg-type]
    repairs = f"{repair_summary(d)} (see [{REPAIR_LOG_NAME}]({REPAIR_LOG_NAME}))"
    rows = [
        ["Experiment", code_span(d.id)],
        ["Outcome", outcome],
        ["Node", md_cell(d.node or NA)],
        ["tmux session", tmux],
        ["Created", fmt_time(d.created_at)],
        ["Started", fmt_time(d.started_at) if d.started_at is not None else "never launched"],
        ["Finished", fmt_time(d.finished_at)],
        ["Elapsed", elapsed],
        ["Time limit", limit],
        ["Attempts", str(len(d.attempts))],
        ["Failures and repairs", repairs],
        ["Evaluations", str(len(c.evals))],
        ["Training steps logged", str(d.train_steps) if d.train_steps else NA],
        ["Blueprint", path_link(d.blueprint_path, d.result_dir)],
        ["YAML (original)", code_span(d.yaml_path)],
        ["YAML (as run)", path_link(d.patched_yaml_path, d.result_dir)],
        ["Result dir", code_span(d.result_dir)],
    ]
    if d.previous_run:
        rows.append(["Previous run", f"[{md_cell(d.previous_run)}]({d.previous_run}/) (an earlier run's files, "
                                     "moved aside before this one started)"])
    return lines + table(["", ""], rows)


def _headline(c: _Ctx) -> list[str]:
    lines: list[str] = []
    for dataset, metrics in changes_since_baseline(c.evals).items():
        for metric, ch in metrics.items():
            name = f"{metric} on {code_span(dataset)}" if dataset else metric
            first = NA if ch["from_step"] is None else ch["from_step"]
            last = NA if ch["to_step"] is None else ch["to_step"]
            lines.append(
                f"- {name}: {fmt_value(ch['from'], metric)} (step {first})"
                f" → {fmt_value(ch['to'], metric)} (step {last}), change {fmt_delta(ch['change'])}"
            )
    return lines


def _evaluations(c: _Ctx) -> list[str]:
    source = [f"Where the numbers come from: {c.data.results_source}.", ""] if c.data.results_source else []
    return source + _evaluation_table(c)


def _evaluation_table(c: _Ctx) -> list[str]:
    if not c.evals:
        lines = ["**No evaluation was recorded.**", ""]
        hint = "This run wrote no validation result and its log has no validation metrics line"
        if c.data.train_steps:
            hint += f" although {c.data.train_steps} training steps were logged"
        hint += (
            " — check `ajet.trainer_common.test_freq`, `val_before_train` and"
            " `val_print_to_markdown_file_path` in the YAML as run, and the log below."
        )
        return lines + [hint]
    metrics = table_metrics(c.evals)
    base = baselines(c.evals)
    header = ["step", "dataset"]
    for m in metrics:
        header.append(m)
        if m in DELTA_METRICS:
            header.append(f"Δ {m}")
    rows: list[list[Any]] = []
    for e in c.evals:
        row: list[Any] = [str(e.step) if e.step is not None else NA, md_cell(e.dataset or "–")]
        for m in metrics:
            row.append(fmt_value(e.metrics.get(m), m))
            if m in DELTA_METRICS:
                row.append("baseline" if e is base.get(e.dataset) else fmt_delta(delta(e, base.get(e.dataset), m)))
        rows.append(row)
    lines = _headline(c)
    lines += ["", "Every evaluation, in step order. Δ is the change since the dataset's step 0"
              " (or its first evaluation when there is no step 0).", ""]
    return lines + table(header, rows)


def _best_final(c: _Ctx) -> list[str]:
    final = c.data.final or {}
    if not final and c.evals:  # the parser gave nothing: fall back to the newest evaluation
        last = c.evals[-1]
        final = {"step": last.step, "dataset": last.dataset, "metrics": last.metrics}
    f_metrics = final.get("metrics") if isinstance(final.get("metrics"), dict) else {
        k: v for k, v in final.items() if k not in ("step", "dataset") and number(v) is not None
    }
    best = c.data.best or {}
    if not f_metrics and not best:
        return ["No final or best values were recorded."]
    lines: list[str] = []
    if final:
        where = f"step {final.get('step', NA)}"
        if final.get("dataset"):
            where += f", dataset {code_span(final.get('dataset'))}"
        lines += [f"Final values are from {where}. Best values are the highest seen, with their step.", ""]
    names = list(dict.fromkeys([*f_metrics, *best]))
    rows = []
    for name in names:
        b = best.get(name)
        if isinstance(b, dict):
            b_value, b_step = b.get("value"), b.get("step")
        else:
            b_value, b_step = b, None
        rows.append([
            code_span(name),
            fmt_value(f_metrics.get(name), name) if name in f_metrics else NA,
            fmt_value(b_value, name) if name in best else NA,
            str(b_step) if b_step is not None else NA,
        ])
    return lines + table(["metric", "final", "best", "best at step"], rows)


def _plot(c: _Ctx) -> list[str]:
    if c.plot_note:
        return [f"No plot: {c.plot_note}."]
    return [f"![mean_reward and task_pass_rate@k over steps]({PLOT_NAME})"]


def _attempts(c: _Ctx) -> list[str]:
    d = c.data
    if not d.attempts:
        return ["The command was never launched."]
    rows = []
    for a in d.attempts:
        dur = None if a.ended_at is None else a.ended_at - a.started_at
        rows.append([
            str(a.number), fmt_time(a.started_at), fmt_time(a.ended_at) if a.ended_at is not None else "running",
            fmt_duration(dur), NA if a.exit_code is None else str(a.exit_code), md_cell(a.end_reason or NA),
            path_link(a.log_path, d.result_dir),
        ])
    lines = table(["#", "started", "ended", "duration", "exit code", "end", "log"], rows)
    commands = list(dict.fromkeys(a.command for a in d.attempts if a.command))
    if len(commands) == 1:
        lines += ["", f"Command: {code_span(commands[0])}"]
    else:
        lines += [""] + [f"- attempt {a.number}: {code_span(a.command)}" for a in d.attempts if a.command]
    return lines


def _preflight(c: _Ctx) -> list[str]:
    d = c.data
    lines: list[str] = []
    if d.preflight_changes:
        rows = [[code_span(ch.get("key", NA)), code_span(ch.get("old", "(unset)")),
                 code_span(ch.get("new", "(unset)")), md_cell(ch.get("reason", ""))]
                for ch in d.preflight_changes if isinstance(ch, dict)]
        lines += ["Changed before the first launch (the original file is kept):", ""]
        lines += table(["setting", "was", "now", "why"], rows)
    else:
        lines.append("The preflight changed nothing.")
    if d.preflight_problems:
        lines += ["", "Problems found:", ""]
        lines += [f"- **{md_cell(p.get('level', '?'))}** {code_span(p.get('field', '?'))}: "
                  f"{md_cell(p.get('message', ''), 600)}" for p in d.preflight_problems if isinstance(p, dict)]
    decisions = [x for x in (d.preflight_env or {}).get("decisions", []) if isinstance(x, dict)]
    if decisions:
        where = md_cell((d.preflight_env or {}).get("environment", "") or NA)
        lines += ["", f"Decisions that read the environment ({where}):", ""]
        lines += [f"- {code_span(x.get('variable', '?'))} {'set' if x.get('is_set') else 'not set'}: "
                  f"{md_cell(x.get('decision', ''))}" for x in decisions]
    return lines


def _repairs(c: _Ctx) -> list[str]:
    d = c.data
    if not d.repairs:
        return [f"No failures. (The full trial-and-error record is in [{REPAIR_LOG_NAME}]({REPAIR_LOG_NAME}).)"]
    rows = [[str(i), fmt_time(r.at), str(r.attempt), code_span(r.signature or "unknown"),
             md_cell("; ".join(r.changes) or NA), md_cell(r.source or NA), md_cell(r.result or NA),
             md_cell(repair_next(d, r))] for i, r in enumerate(d.repairs, 1)]
    lines = [f"Details, log excerpts and diffs: [{REPAIR_LOG_NAME}]({REPAIR_LOG_NAME}).", ""]
    return lines + table(["#", "when", "attempt", "diagnosis", "change", "source", "result", "next"], rows)


def _timeline(c: _Ctx) -> list[str]:
    entries = [h for h in c.data.history if isinstance(h, dict)]
    if not entries:
        return ["No lifecycle transitions were recorded."]
    origin = finite(c.data.created_at)
    if origin is None:
        origin = finite(entries[0].get("at"))
    rows = []
    for h in entries:
        at = finite(h.get("at"))
        since = fmt_duration(at - origin) if at is not None and origin is not None else NA
        rows.append([fmt_time(h.get("at")), since, md_cell(f"{h.get('from', '?')} → {h.get('to', '?')}"),
                     md_cell(h.get("trigger", "")), md_cell(h.get("attempt", "")), md_cell(h.get("reason", ""))])
    return table(["time", "since created", "transition", "trigger", "attempt", "reason"], rows)


def _log_tail(c: _Ctx) -> list[str]:
    lines = [clean(line).rstrip()[:1000] for line in c.data.log_tail[-LOG_TAIL_LINES:]]
    if not lines:
        return ["No log lines were captured."]
    last = c.data.attempts[-1] if c.data.attempts else None
    where = f" of attempt {last.number} ({path_link(last.log_path, c.data.result_dir)})" if last else ""
    return [f"Last {len(lines)} lines{where}:", "", *fenced("\n".join(lines))]


def repair_summary(data: ReportData) -> str:
    """`2 failures, 1 relaunched after a repair` (a failure is not always followed by a repair)."""
    failures = len(data.repairs)
    if not failures:
        return "no failures"
    relaunched = sum(1 for r in data.repairs if r.result.strip().lower() == "relaunched")
    return f"{failures} failure{'s' if failures != 1 else ''}, {relaunched} relaunched after a repair"


def repair_next(data: ReportData, record: RepairRecord) -> str:
    """The record's own `next`, else what the following attempt did, else how the experiment ended."""
    if record.next.strip():
        return md_cell(record.next, 1000)
    following = next((a for a in data.attempts if a.number == record.attempt + 1), None)
    if following is not None:
        return f"attempt {following.number}: {md_cell(following.end_reason or 'still running')}"
    return f"no further attempt; the experiment ended {md_cell(data.outcome or 'unknown')}"


def _section(title: str, render: Callable[[_Ctx], list[str]], c: _Ctx) -> list[str]:
    try:
        body = render(c)
    except Exception as exc:  # a report with one broken section beats no report
        body = [f"_This section could not be rendered ({type(exc).__name__}: {clean(exc)[:300]})._"]
    return [f"## {title}", "", *body, ""]


def render_report(data: ReportData, evals: list[Eval], plot_note: str, now: float | None = None) -> str:
    c = _Ctx(data=data, evals=evals, now=time.time() if now is None else now, plot_note=plot_note)
    parts = [f"# Experiment report: {md_cell(data.id)}", ""]
    for title, render in (
        ("Summary", _summary),
        ("Evaluations", _evaluations),
        ("Best and final values", _best_final),
        ("Reward plot", _plot),
        ("Attempts", _attempts),
        ("Preflight", _preflight),
        ("Repairs", _repairs),
        ("Lifecycle timeline", _timeline),
        ("Log tail", _log_tail),
    ):
        parts += _section(title, render, c)
    parts.append(f"_Written by ajet-runner at {fmt_time(c.now)}; machine-readable copy: [{RESULTS_NAME}]"
                 f"({RESULTS_NAME})._")
    return "\n".join(parts) + "\n"


# ----------------------------------------------------------------------------- results.json


def json_safe(value: Any) -> Any:
    """JSON-able data: non-finite floats become null (strict JSON has no NaN)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, Enum):
        return json_safe(value.value)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def results_document(data: ReportData, evals: list[Eval], plot_written: bool, now: float) -> dict[str, Any]:
    """ReportData's fields at the top level (so `ReportData.model_validate` reads it back) plus computed ones."""
    elapsed = _Ctx(data=data, evals=evals, now=now, plot_note="").elapsed
    doc: dict[str, Any] = {"report_version": REPORT_VERSION, **data.model_dump()}
    doc.update(
        generated_at=iso_utc(now),
        generated_at_epoch=now,
        created_at_iso=iso_utc(data.created_at) if finite(data.created_at) is not None else None,
        started_at_iso=iso_utc(data.started_at) if finite(data.started_at) is not None else None,
        finished_at_iso=iso_utc(data.finished_at) if finite(data.finished_at) is not None else None,
        elapsed_seconds=elapsed,
        attempt_count=len(data.attempts),
        repair_count=len(data.repairs),
        evaluation_count=len(evals),
        datasets=list(dict.fromkeys(e.dataset for e in evals)),
        changes_since_baseline=changes_since_baseline(evals),
        files={
            "report": REPORT_NAME,
            "results": RESULTS_NAME,
            "repair_log": REPAIR_LOG_NAME,
            "plot": PLOT_NAME if plot_written else None,
        },
    )
    return json_safe(doc)


# ----------------------------------------------------------------------------- entry points


def write_report(data: ReportData) -> dict[str, Path]:
    """Write the plot (when there is something to draw), `results.json`, then `experiment_report.md`.

    Returns the paths written, keyed "plot" (if drawn), "results", "report".
    """
    out_dir = Path(data.result_dir)
    os.close(open_dir(out_dir))  # created if missing, inside the allowed roots when confined
    now = time.time()
    evals = normalize_evaluations(data.evaluations)
    written: dict[str, Path] = {}
    plot_path = out_dir / PLOT_NAME
    try:
        plot_note = write_plot(plot_path, evals, f"{data.id}: {data.outcome or 'unknown'}")
    except Exception as exc:  # matplotlib trouble must not cost the report
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
