"""`stage_plot.png`: every experiment of a stage overlaid, one panel per metric (mean_reward, task_pass_rate@k).

Drawn with matplotlib's Agg canvas as `reward_plot.png` is (workers/report/plot.py) and with the same
palette (resultdir/palette.py) — here a colour is an experiment, the same one the console's stage chart
gives it, since each panel holds one metric.
"""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

from ajet_runner.resultdir.flag import atomic_write_bytes
from ajet_runner.resultdir.palette import PALETTE, chart_metrics
from ajet_runner.statemachine.compare import StageComparison

STAGE_PLOT_NAME = "stage_plot.png"
MAX_PANELS = 4
PANEL_INCHES = (6.0, 4.2)
DPI = 100
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LABEL_KEYS = 3  # differing values named in a legend entry


def plotted_metrics(comparison: StageComparison) -> list[str]:
    """The panels: the charted metrics with a curve (mean_reward first), else the first others."""
    with_curves = [m for m in comparison.metrics if comparison.curves.get(m)]
    charted = chart_metrics(with_curves) or with_curves
    return charted[:MAX_PANELS]


def experiment_label(comparison: StageComparison, exp_id: str) -> str:
    """An experiment's legend entry: its id and the values it differs in."""
    row = next((r for r in comparison.rows if r.id == exp_id), None)
    if row is None or not row.differs:
        return exp_id
    shown = list(row.differs.items())[:LABEL_KEYS]
    values = ", ".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in shown) + (", …" if len(row.differs) > LABEL_KEYS
                                                                                else "")
    return f"{exp_id} ({values})"


def render_stage_png(comparison: StageComparison) -> bytes | None:
    """The PNG, or None when no experiment has a curve."""
    metrics = plotted_metrics(comparison)
    if not metrics:
        return None
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib is slow to import
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    cols = min(2, len(metrics))
    rows = -(-len(metrics) // cols)
    fig = Figure(figsize=(PANEL_INCHES[0] * cols, PANEL_INCHES[1] * rows + 0.5), dpi=DPI)
    canvas = FigureCanvasAgg(fig)
    grid = fig.subplots(rows, cols, squeeze=False)
    axes = [ax for line in grid for ax in line][: len(metrics)]
    for ax in [ax for line in grid for ax in line][len(metrics):]:
        ax.set_visible(False)
    order = [r.id for r in comparison.rows]
    for ax, metric in zip(axes, metrics, strict=True):
        curves = comparison.curves.get(metric, {})
        for i, exp_id in enumerate(order):
            points = curves.get(exp_id) or []
            if not points:
                continue
            ax.plot([p[0] for p in points], [p[1] for p in points], color=PALETTE[i % len(PALETTE)],
                    marker=MARKERS[(i // len(PALETTE)) % len(MARKERS)], markersize=4,
                    label=experiment_label(comparison, exp_id))
        ax.set_title(metric)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="x-small")
    height = PANEL_INCHES[1] * rows + 0.5
    fig.suptitle(f"stage {comparison.stage}: {len(order)} experiment(s)", y=1 - 0.12 / height)
    fig.subplots_adjust(left=0.08, right=0.98, top=1 - 0.75 / height, bottom=0.1 / rows,
                        wspace=0.18, hspace=0.35)
    canvas.draw()
    buf = BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def write_stage_plot(path: Path, comparison: StageComparison) -> bool:
    """Write the plot; False (and nothing written) when there is nothing to draw."""
    png = render_stage_png(comparison)
    if png is None:
        return False
    atomic_write_bytes(path, png)
    return True
