"""The stage page's chart: one metric as an inline SVG (no script, no library), with an HTML legend under it.

What is drawn is chosen by resultdir/stage_series.py, as in `stage_plot.png`: runs that differ only in their
seed are one mean curve with a band from the lowest to the highest run; the best TOP_N series are in colour
and named by what differs; the rest are one grey band. The y-axis is scaled to the data (a 0.01 difference
fills the height it needs, not 1 % of a fixed 0–1 axis); identical curves get different dashes and the legend
calls them ties.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from html import escape

from markupsafe import Markup

from ajet_runner.resultdir.stage_series import Series, StageChart
from ajet_runner.service.ui.html import step_ticks

MAX_DOTS = 60  # points per series drawn as dots with a tooltip; longer curves are lines only


def value_ticks(lo: float, hi: float, most: int = 6) -> list[float]:
    """Round ticks (1, 2, 2.5, 5 x 10^k apart) over [lo, hi], at most `most`."""
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / max(1, most - 1)
    scale = 10 ** math.floor(math.log10(raw))
    step = next(m * scale for m in (1, 2, 2.5, 5, 10) if m * scale >= raw)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def _range(chart: StageChart) -> tuple[float, float, float, float]:
    xs: list[float] = []
    ys: list[float] = []
    for s in chart.shown:
        for p in s.points:
            xs.append(p[0])
            ys.extend(p[1:4] if s.band else p[1:2])
    for p in chart.rest_band:
        xs.append(p[0])
        ys.extend(p[1:3])
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    if x1 == x0:
        x0, x1 = max(0.0, x0 - 1), x0 + 1
    pad = (y1 - y0) * 0.06 or max(abs(y1) * 0.05, 0.01)
    return x0, x1, y0 - pad, y1 + pad


def _digits(ticks: list[float]) -> int:
    if len(ticks) < 2:
        return 4
    step = abs(ticks[1] - ticks[0])
    digits = max(0, -math.floor(math.log10(step) + 1e-9))
    return min(6, digits + (1 if round(step * 10**digits, 6) % 1 else 0))  # 0.25 apart: two decimals


def stage_chart_svg(chart: StageChart, width: int = 640, height: int = 260) -> Markup:
    """The chart of one metric, or a note when nothing has a curve of it."""
    if not chart.shown and not chart.rest_band:
        return Markup(f'<p class="muted">No {escape(chart.metric)} recorded yet.</p>')
    pad_l, pad_r, pad_t, pad_b = 56, 12, 12, 28
    x0, x1, y0, y1 = _range(chart)

    def px(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * (width - pad_l - pad_r)

    def py(y: float) -> float:
        return height - pad_b - (y - y0) / (y1 - y0) * (height - pad_t - pad_b)

    metric = escape(chart.metric)
    parts = [f'<svg class="chart stage-chart" viewBox="0 0 {width} {height}" role="img" data-metric="{metric}" '
             f'data-y-min="{y0:.6g}" data-y-max="{y1:.6g}" aria-label="{metric} over steps">']
    ticks = value_ticks(y0, y1)
    digits = _digits(ticks)
    for y in ticks:
        parts.append(f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{py(y):.1f}" y2="{py(y):.1f}" class="grid"/>'
                     f'<text x="{pad_l - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.{digits}f}</text>')
    for x in step_ticks(x0, x1):
        parts.append(f'<text class="tick" x="{px(x):.1f}" y="{height - 10}" text-anchor="middle">{x}</text>')
    parts.append(f'<text class="axis" x="{width - pad_r}" y="{height}" text-anchor="end">step · {metric}</text>')
    if chart.rest_band:
        parts.append(_band(chart.rest_band, px, py, "rest-band", "#9ca3af"))
    for s in sorted(reversed(chart.shown), key=lambda s: bool(s.dash)):  # the best last; a tie dashed on top
        parts += _series(s, px, py)
    parts.append("</svg>")
    return Markup("".join(parts) + _legend(chart))  # numbers and escaped names only


def _series(s: Series, px: Callable[[float], float], py: Callable[[float], float]) -> list[str]:
    """One shown curve: its seed band (a group of repeats), its line, and a dot with the values per point
    when it has few."""
    parts = []
    if s.band:
        parts.append(_band([[p[0], p[2], p[3]] for p in s.points], px, py, "seed-band", s.colour))
    path = " ".join(f"{px(p[0]):.1f},{py(p[1]):.1f}" for p in s.points)
    dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
    parts.append(f'<polyline class="series" points="{path}" fill="none" stroke="{s.colour}" stroke-width="2"'
                 f'{dash}/>')
    if len(s.points) <= MAX_DOTS:
        name = escape(s.label)
        parts += [f'<circle cx="{px(p[0]):.1f}" cy="{py(p[1]):.1f}" r="2.5" fill="{s.colour}"><title>{name} '
                  f'step {p[0]:g}: {p[1]:.4f}{_spread(p)}</title></circle>' for p in s.points]
    return parts


def _spread(p: list[float]) -> str:
    return f" (lowest {p[2]:.4f}, highest {p[3]:.4f}, {int(p[4])} runs)" if len(p) > 4 else ""


def _band(points: list[list[float]], px: object, py: object, cls: str, colour: str) -> str:
    upper = [f"{px(p[0]):.1f},{py(p[2]):.1f}" for p in points]  # type: ignore[operator]
    lower = [f"{px(p[0]):.1f},{py(p[1]):.1f}" for p in reversed(points)]  # type: ignore[operator]
    opacity = ".3" if cls == "rest-band" else ".15"
    return (f'<polygon class="{cls}" points="{" ".join(upper + lower)}" fill="{colour}" fill-opacity="{opacity}" '
            'stroke="none"/>')


def _swatch(colour: str, dash: str) -> str:
    """A line sample as SVG attributes (the CSP forbids inline styles)."""
    return (f'<svg class="swatch" viewBox="0 0 22 10" aria-hidden="true"><line x1="0" x2="22" y1="5" y2="5" '
            f'stroke="{colour}" stroke-width="3"{dash}/></svg>')


def _legend(chart: StageChart) -> str:
    items = []
    for s in chart.shown:
        note = f" · {len(s.ids)} runs" if s.band else ""
        tie = f' <span class="tie">= tie with {escape(", ".join(s.ties))}</span>' if s.ties else ""
        final = f' <span class="muted">{s.final:.4f}</span>' if s.final is not None else ""
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        items.append(f'<li>{_swatch(s.colour, dash)}<span class="label" title="{escape(", ".join(s.ids))}">'
                     f'{escape(s.label)}</span>{final}<span class="muted">{note}</span>{tie}</li>')
    if chart.rest:
        items.append('<li class="rest"><svg class="swatch" viewBox="0 0 22 10" aria-hidden="true"><rect width="22" '
                     f'height="10" fill="#9ca3af" fill-opacity=".35"/></svg>{escape(chart.rest_label)}</li>')
    return f'<ol class="legend" data-metric="{escape(chart.metric)}">{"".join(items)}</ol>'
