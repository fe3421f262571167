"""The stage page's chart: one metric, every experiment overlaid, as an inline SVG (no script, no library).

The colours are the palette of the plots (resultdir/palette.py); here a colour is an experiment, in the
stage's order — the same one `stage_plot.png` gives it.
"""

from __future__ import annotations

from html import escape

from markupsafe import Markup

from ajet_runner.resultdir.palette import PALETTE
from ajet_runner.service.ui.html import _legend_rows, step_ticks

Series = list[tuple[str, list[list[float]]]]  # (legend name, [[step, value], ...]) in the stage's order


def overlay_chart(metric: str, series: Series, width: int = 640, plot_height: int = 220) -> Markup:
    """`metric` over steps for each experiment that has a curve of it."""
    drawn = [(i, name, pts) for i, (name, pts) in enumerate(series) if pts]
    if not drawn:
        return Markup(f'<p class="muted">No {escape(metric)} recorded yet.</p>')
    pad_l, pad_r, pad_t, pad_b = 48, 12, 12, 28
    names = [name for _, name, _ in drawn]
    rows = _legend_rows(names, width - pad_l - pad_r)
    height = plot_height + 8 + 18 * len(rows) + 6
    xs = [p[0] for _, _, pts in drawn for p in pts]
    ys = [p[1] for _, _, pts in drawn for p in pts]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = max(0.0, x0 - 1), x0 + 1
    y0, y1 = min(ys + [0.0]), max(ys + [1.0 if max(ys) <= 1 else max(ys)])
    y1 = y1 if y1 > y0 else y0 + 1

    def px(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * (width - pad_l - pad_r)

    def py(y: float) -> float:
        return plot_height - pad_b - (y - y0) / (y1 - y0) * (plot_height - pad_t - pad_b)

    parts = [f'<svg class="chart stage-chart" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="{escape(metric)} of every experiment over steps" data-metric="{escape(metric)}">']
    y_digits = 0 if y1 - y0 >= 20 else 2
    for k in range(5):
        y = y0 + (y1 - y0) * k / 4
        parts.append(f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{py(y):.1f}" y2="{py(y):.1f}" class="grid"/>'
                     f'<text x="{pad_l - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.{y_digits}f}</text>')
    for x in step_ticks(x0, x1):
        parts.append(f'<text class="tick" x="{px(x):.1f}" y="{plot_height - 10}" text-anchor="middle">{x}</text>')
    parts.append(f'<text class="axis" x="{width - pad_r}" y="{plot_height}" text-anchor="end">step · '
                 f'{escape(metric)}</text>')
    for i, name, pts in drawn:
        colour = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"><title>{escape(name)} '
                  f'step {x:g}: {y:.4f}</title></circle>' for x, y in pts]
    for r, row in enumerate(rows):
        lx, ly = float(pad_l), float(plot_height + 8 + 18 * r)
        for k in row:
            i, name, _ = drawn[k]
            colour = PALETTE[i % len(PALETTE)]
            parts.append(f'<g class="legend-item"><line class="swatch" x1="{lx:.1f}" x2="{lx + 22:.1f}" '
                         f'y1="{ly + 5}" y2="{ly + 5}" stroke="{colour}" stroke-width="4"/>'
                         f'<text x="{lx + 28:.1f}" y="{ly + 9}">{escape(name)}</text></g>')
            lx += 40 + 6.8 * len(name)
    parts.append("</svg>")
    return Markup("".join(parts))  # numbers and escaped names only
