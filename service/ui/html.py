"""Safe HTML from untrusted text: markdown (raw HTML off, links checked), diffs, and a small SVG chart.

Everything here escapes its input; templates add their own autoescaping on top.
"""

from __future__ import annotations

import math
import posixpath
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlsplit

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from ajet_runner.resultdir.palette import DASHES, chart_metrics, is_charted, metric_colour
from ajet_runner.service.ui.console_data import SERVED_FILES
from ajet_runner.statemachine.durations import format_duration, format_limit, format_progress
from ajet_runner.statemachine.models import Evaluation


def _diff_lines(code: str) -> str:
    out = []
    for line in code.split("\n"):
        cls = ("add" if line.startswith("+") and not line.startswith("+++") else
               "del" if line.startswith("-") and not line.startswith("---") else
               "hunk" if line.startswith("@@") else "")
        out.append(f'<span class="d-{cls}">{escape(line)}</span>' if cls else str(escape(line)))
    return "\n".join(out)


def _highlight(code: str, lang: str, _attrs: str) -> str:
    return _diff_lines(code) if lang in ("diff", "patch") else ""  # "" = markdown-it escapes it itself


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "highlight": _highlight})
    md.enable("table")
    md.enable("strikethrough")
    return md


_MD = _markdown()


def _local_target(url: str, exp_id: str) -> str | None:
    """A relative link of a report: the console's URL for a file it serves, the log panel for a log, else None."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or url.startswith(("/", "#")):
        return url if parts.scheme in ("http", "https") or url.startswith("#") else None
    name = posixpath.normpath(parts.path)
    if name in SERVED_FILES:
        return f"/ui/experiments/{quote(exp_id, safe='')}/files/{name}"
    if name.endswith(".log"):
        return "#log"
    return None


def _confine_link(child: Any, exp_id: str) -> None:
    """A link's or an image's target rewritten to what the console serves (or kept: http(s), opened without
    a referrer), or dropped."""
    attr = "href" if child.type == "link_open" else "src" if child.type == "image" else None
    if attr is None:
        return
    target = _local_target(str(child.attrGet(attr) or ""), exp_id)
    if target is None:
        child.attrs.pop(attr, None)
        return
    child.attrSet(attr, target)
    if attr == "href" and target.startswith("http"):
        child.attrSet("rel", "noopener noreferrer nofollow")


def markdown(text: str, exp_id: str) -> Markup:
    """Render a result-dir markdown file: no raw HTML, links only to what the console serves or http(s)."""
    tokens = _MD.parse(text)
    for tok in tokens:
        for child in tok.children or []:
            _confine_link(child, exp_id)
    return Markup(_MD.renderer.render(tokens, _MD.options, {}))  # markdown-it escaped it (html off)


def duration(seconds: float | None) -> str:
    return "" if seconds is None else format_duration(seconds)


def limit(seconds: float | None) -> str:
    return "" if seconds is None else format_limit(seconds)


def progress(elapsed: float | None, max_seconds: float | None) -> str:
    """`3m 00s of 5h`, as the CLI prints it."""
    return "" if elapsed is None and not max_seconds else format_progress(elapsed, max_seconds)


def age(ts: float | None, now: float | None = None) -> str:
    return "" if not ts else format_duration(max(0.0, (now or time.time()) - ts)) + " ago"


def clock(ts: float | None) -> str:
    return "" if not ts else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z"


def number(value: Any, digits: int = 4) -> str:
    """A metric value: counts (whole numbers of 1 or more) as integers, anything else with `digits` decimals."""
    if isinstance(value, bool):
        return str(value).lower()
    try:
        f = float(value)
    except (TypeError, ValueError):
        return "" if value is None else str(value)
    if not math.isfinite(f):
        return str(f)
    return str(int(f)) if f.is_integer() and abs(f) >= 1 else f"{f:.{digits}f}"


Series = dict[tuple[str, str], list[tuple[float, float]]]


def _chart_series(evals: Iterable[Evaluation]) -> Series:
    """(dataset, metric) -> [(step, value)] for the headline metrics, finite values only."""
    series: dict[tuple[str, str], dict[float, float]] = {}
    for e in evals:
        for key in e.metrics:
            if is_charted(key) and (v := e.get(key)) is not None:
                series.setdefault((e.dataset, key), {})[float(e.step)] = v  # a re-run step: its latest
    return {name: sorted(points.items()) for name, points in series.items()}


Segments = dict[tuple[str, str], list[tuple[int | None, list[tuple[float, float]]]]]


def _chart_segments(evals: list[Evaluation]) -> Segments:
    """(dataset, metric) -> one (attempt, points) segment per attempt, in attempt order: a relaunched run's curve
    is drawn in pieces, never joined across attempts (their steps may repeat, or mean another batch size)."""
    by_attempt: dict[int | None, list[Evaluation]] = {}
    for e in evals:
        by_attempt.setdefault(e.attempt, []).append(e)
    out: Segments = {}
    for attempt in sorted(by_attempt, key=lambda a: -1 if a is None else a):
        for key, points in _chart_series(by_attempt[attempt]).items():
            out.setdefault(key, []).append((attempt, points))
    return out


def step_ticks(x0: float, x1: float, most: int = 6) -> list[int]:
    """Whole-number ticks over [x0, x1] at a round interval (1, 2, 5 x 10^k), at most `most` of them."""
    lo, hi = math.ceil(x0), math.floor(x1)
    if hi <= lo:
        return [lo] if lo == hi else []
    interval = 1
    for scale in (10**k for k in range(12)):
        interval = next((m * scale for m in (1, 2, 5) if (hi - lo) / (m * scale) <= most - 1), 0)
        if interval:
            break
    first = math.ceil(lo / interval) * interval
    return list(range(first, hi + 1, interval))


def _legend_rows(names: list[str], width: float, char: float = 6.8, item_pad: float = 40.0) -> list[list[int]]:
    """Legend entries (indexes) per row, so that each row fits `width`."""
    rows: list[list[int]] = [[]]
    used = 0.0
    for i, name in enumerate(names):
        need = item_pad + char * len(name)
        if rows[-1] and used + need > width:
            rows.append([])
            used = 0.0
        rows[-1].append(i)
        used += need
    return rows


_PAD_L, _PAD_R, _PAD_T, _PAD_B = 48, 12, 12, 28


@dataclass(frozen=True)
class _Frame:
    """The plot's data window and pixel box: where a (step, value) point is drawn."""

    x0: float
    x1: float
    y0: float
    y1: float
    width: int
    plot_height: int

    @classmethod
    def around(cls, series: Series, width: int, plot_height: int) -> _Frame:
        xs = [x for pts in series.values() for x, _ in pts]
        ys = [y for pts in series.values() for _, y in pts]
        x0, x1 = min(xs), max(xs)
        if x1 == x0:  # one evaluation: a window around it
            x0, x1 = max(0.0, x0 - 1), x0 + 1
        y0, y1 = min(ys + [0.0]), max(ys + [1.0 if max(ys) <= 1 else max(ys)])
        return cls(x0, x1, y0, y1 if y1 > y0 else y0 + 1, width, plot_height)

    def px(self, x: float) -> float:
        return _PAD_L + (x - self.x0) / (self.x1 - self.x0) * (self.width - _PAD_L - _PAD_R)

    def py(self, y: float) -> float:
        return self.plot_height - _PAD_B - (y - self.y0) / (self.y1 - self.y0) * (self.plot_height - _PAD_T - _PAD_B)


def chart(evals: list[Evaluation], width: int = 640, plot_height: int = 220) -> Markup:
    """mean_reward and task_pass_rate@k over steps as an inline SVG (no script, no external library): one colour
    per metric as in reward_plot.png, one dash per dataset, whole-number step ticks, the legend below the plot."""
    series = _chart_series(evals)
    if not series:
        return Markup('<p class="muted">No evaluation yet.</p>')
    metrics = chart_metrics(m for _, m in series)
    datasets = sorted({d for d, _ in series})
    order = sorted(series, key=lambda k: (metrics.index(k[1]), datasets.index(k[0])))
    names = [f"{d}: {m}" if len(datasets) > 1 else m for d, m in order]
    rows = _legend_rows(names, width - _PAD_L - _PAD_R)
    height = plot_height + 8 + 18 * len(rows) + 6  # room under the last row for descenders (the "_" in names)
    frame = _Frame.around(series, width, plot_height)
    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="evaluations over steps">']
    parts += _axes(frame)
    segments = _chart_segments(evals)
    attempts = _attempts(segments)
    parts += _attempt_marks(frame, segments, attempts)
    for i, key in enumerate(order):
        style = _stroke(key, metrics, datasets)
        for attempt, points in segments.get(key, []):
            parts += _segment(frame, style, names[i], attempt, points, len(attempts) > 1)
    parts += _legend(rows, names, [_stroke(key, metrics, datasets) for key in order], plot_height)
    parts.append("</svg>")
    return Markup("".join(parts))  # numbers and escaped names only


def _attempts(segments: Segments) -> list[int]:
    """The attempts the segments come from, in order."""
    return sorted({a for parts in segments.values() for a, _ in parts if a is not None})


def _legend(rows: list[list[int]], names: list[str], strokes: list[tuple[str, str]], plot_height: int) -> list[str]:
    """The legend, outside the plot: per series a swatch in its colour and dash, and its name."""
    out = []
    for r, row in enumerate(rows):
        lx, ly = float(_PAD_L), plot_height + 8 + 18 * r
        for i in row:
            colour, dashed = strokes[i]
            out.append(f'<g class="legend-item"><line class="swatch" x1="{lx:.1f}" x2="{lx + 22:.1f}" y1="{ly + 5}" '
                       f'y2="{ly + 5}" stroke="{colour}" stroke-width="4"{dashed}/>'
                       f'<text x="{lx + 28:.1f}" y="{ly + 9}">{escape(names[i])}</text></g>')
            lx += 40 + 6.8 * len(names[i])
    return out


def _stroke(key: tuple[str, str], metrics: list[str], datasets: list[str]) -> tuple[str, str]:
    """A series' colour (by metric) and its dash attribute (by dataset; "" for a solid line)."""
    dataset, metric = key
    dash = DASHES[datasets.index(dataset) % len(DASHES)]
    return metric_colour(metric, metrics), f' stroke-dasharray="{dash}"' if dash else ""


def _axes(frame: _Frame) -> list[str]:
    """Five grid lines with their values, the whole-number step ticks, the x axis's name."""
    out = []
    y0, y1 = frame.y0, frame.y1
    y_digits = 0 if y1 - y0 >= 20 else 2
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        out.append(f'<line x1="{_PAD_L}" x2="{frame.width - _PAD_R}" y1="{frame.py(y):.1f}" y2="{frame.py(y):.1f}" '
                   f'class="grid"/><text x="{_PAD_L - 4}" y="{frame.py(y) + 4:.1f}" text-anchor="end">'
                   f'{y:.{y_digits}f}</text>')
    for x in step_ticks(frame.x0, frame.x1):
        out.append(f'<text class="tick" x="{frame.px(x):.1f}" y="{frame.plot_height - 10}" '
                   f'text-anchor="middle">{x}</text>')
    out.append(f'<text class="axis" x="{frame.width - _PAD_R}" y="{frame.plot_height}" text-anchor="end">step</text>')
    return out


def _attempt_marks(frame: _Frame, segments: Segments, attempts: list[int]) -> list[str]:
    """A dashed line where each relaunched attempt's curve starts."""
    out = []
    for later in attempts[1:]:
        first = min(x for parts_ in segments.values() for a, pts in parts_ if a == later for x, _ in pts)
        out.append(f'<line class="attempt-mark" x1="{frame.px(first):.1f}" x2="{frame.px(first):.1f}" y1="{_PAD_T}" '
                   f'y2="{frame.plot_height - _PAD_B}" stroke="#888" stroke-dasharray="2 3"/>'
                   f'<text class="attempt-label" x="{frame.px(first) + 3:.1f}" y="{_PAD_T + 10}">'
                   f'attempt {later}</text>')
    return out


def _segment(frame: _Frame, style: tuple[str, str], name: str, attempt: int | None,
             points: list[tuple[float, float]], several: bool) -> list[str]:
    """One attempt's curve of one series, with a titled dot per evaluation."""
    colour, dashed = style
    of = f" (attempt {attempt})" if several and attempt is not None else ""
    path = " ".join(f"{frame.px(x):.1f},{frame.py(y):.1f}" for x, y in points)
    return [f'<polyline class="segment" data-attempt="{attempt if attempt is not None else ""}" '
            f'points="{path}" fill="none" stroke="{colour}" stroke-width="2"{dashed}/>',
            *(f'<circle cx="{frame.px(x):.1f}" cy="{frame.py(y):.1f}" r="3" fill="{colour}"><title>{escape(name)}{of} '
              f'step {x:g}: {y:.4f}</title></circle>' for x, y in points)]
