"""`stage_plot.png`: a stage's curves, one panel per metric (mean_reward, task_pass_rate@k), readable at 4 runs
and at 200.

What is drawn is chosen by resultdir/stage_series.py, as the console's stage chart is: runs that differ only
in their seed are one series (the mean, with a band from the lowest to the highest run); the best TOP_N
series are in colour with a legend entry named by what differs; the rest are one grey band. Identical
curves get different dashes. The y-axis is scaled to the data. Drawn with matplotlib's Agg canvas, with a
fixed legend place: `loc="best"` over 200 curves took most of the 41 s `compare` once spent here.
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path
from typing import Any

from ajet_runner.resultdir.flag import atomic_write_bytes
from ajet_runner.resultdir.palette import chart_metrics
from ajet_runner.resultdir.stage_series import StageChart, stage_chart
from ajet_runner.statemachine.comparison.compare import StageComparison
from ajet_runner.workers.report.plot_fonts import use_installed_fonts

STAGE_PLOT_NAME = "stage_plot.png"
MAX_PANELS = 4
PANEL_INCHES = (7.0, 4.6)
DPI = 100
LABEL_CHARS = 48  # of a legend entry


def plotted_metrics(comparison: StageComparison) -> list[str]:
    """The panels: the charted metrics with a curve (mean_reward first), else the first others."""
    with_curves = [m for m in comparison.metrics if comparison.curves.get(m)]
    charted = chart_metrics(with_curves) or with_curves
    return charted[:MAX_PANELS]


def _dashes(dash: str) -> Any:
    return (0, tuple(float(x) for x in dash.split())) if dash else "solid"


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def _panel(ax: Any, chart: StageChart) -> None:
    from matplotlib.ticker import MaxNLocator

    if chart.rest_band:
        xs = [p[0] for p in chart.rest_band]
        ax.fill_between(xs, [p[1] for p in chart.rest_band], [p[2] for p in chart.rest_band], color="#9a9a9a",
                        alpha=0.25, linewidth=0, label=_short(chart.rest_label))
    for s in sorted(reversed(chart.shown), key=lambda s: bool(s.dash)):  # the best last; a tie dashed on top
        xs = [p[0] for p in s.points]
        label = _short(s.label + (f" ({len(s.ids)} runs)" if s.band else "") + (" = tie" if s.ties else ""))
        if s.band:
            ax.fill_between(xs, [p[2] for p in s.points], [p[3] for p in s.points], color=s.colour, alpha=0.15,
                            linewidth=0)
        ax.plot(xs, [p[1] for p in s.points], color=s.colour, linestyle=_dashes(s.dash), linewidth=1.8,
                marker="o" if len(s.points) <= 30 else None, markersize=3, label=label)
    ax.set_title(chart.metric + (" (mean of seeds, band: lowest–highest)" if chart.grouped else ""), fontsize=10)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    handles, labels = ax.get_legend_handles_labels()
    if handles:  # best first, the rest's band last
        order = sorted(range(len(labels)), key=lambda i: (labels[i].startswith("the other"), -i))
        ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize="x-small", loc="lower right",
                  framealpha=0.85)


def render_stage_png(comparison: StageComparison) -> bytes | None:
    """The PNG, or None when no experiment has a curve."""
    metrics = plotted_metrics(comparison)
    if not metrics:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib is slow to import
    from matplotlib.figure import Figure

    charts = [stage_chart(comparison, m) for m in metrics]
    if any(not text.isascii() for chart in charts for text in [comparison.stage, *(s.label for s in chart.shown)]):
        use_installed_fonts()  # CJK fallback fonts only when a label needs them (each is a 20 MB font file)
    cols = min(2, len(metrics))
    rows = -(-len(metrics) // cols)
    height = PANEL_INCHES[1] * rows + 0.5
    fig = Figure(figsize=(PANEL_INCHES[0] * cols, height), dpi=DPI)
    canvas = FigureCanvasAgg(fig)
    grid = fig.subplots(rows, cols, squeeze=False)
    axes = [ax for line in grid for ax in line]
    for ax in axes[len(metrics):]:
        ax.set_visible(False)
    for ax, chart in zip(axes, charts, strict=False):
        _panel(ax, chart)
    fig.suptitle(f"stage {comparison.stage}: {len(comparison.rows)} experiment(s)", y=1 - 0.12 / height)
    fig.subplots_adjust(left=0.07, right=0.98, top=1 - 0.75 / height, bottom=0.1 / rows, wspace=0.16, hspace=0.35)
    canvas.draw()  # once: savefig would draw the whole figure again
    return _png(canvas)


def _png(canvas: Any) -> bytes:
    from PIL import Image

    width, height = canvas.get_width_height()
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buf = BytesIO()
    image.convert("RGB").save(buf, format="png", compress_level=1, dpi=(DPI, DPI))
    return buf.getvalue()


def write_stage_plot(path: Path, comparison: StageComparison) -> bool:
    """Write the plot; False (and nothing written) when there is nothing to draw."""
    png = render_stage_png(comparison)
    if png is None:
        return False
    atomic_write_bytes(path, png)
    return True
