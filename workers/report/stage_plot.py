"""`stage_plot.png`: a stage's curves, one panel per metric (mean_reward, task_pass_rate@k), readable at 4 runs
and at 200.

What is drawn is chosen by resultdir/stage_series.py, as the console's stage chart is: runs that differ only
in their seed are one series (the mean, with a band from the lowest to the highest run); the best TOP_N
series are in colour with a legend entry named by what differs; the rest are one grey band. Identical
curves get different dashes. The y-axis is scaled to the data. Drawn with matplotlib's Agg canvas, with a
fixed legend place: `loc="best"` over 200 curves took most of the 41 s `compare` once spent here.
"""

from __future__ import annotations

import hashlib
import threading
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
PLOT_VERSION = 2  # of the drawing below: a plot drawn by another version is drawn again
DIGEST_KEY = "ajet-runner:drawn-from"  # the PNG text chunk holding plot_digest()
HEAD_BYTES = 4096  # the PNG's signature, header and text chunks come before its pixels
REST_COLOUR = "#9a9a9a"


def _import_matplotlib() -> None:
    try:
        import matplotlib.backends.backend_agg
        import matplotlib.collections
        import matplotlib.figure  # noqa: F401
        import PIL.Image  # noqa: F401
    except Exception:  # noqa: BLE001 - a broken matplotlib is reported when the plot is drawn
        return


_preload: list[threading.Thread] = []  # the import under way, if one was started


def preload_matplotlib() -> threading.Thread:
    """Import what the plot draws with on a daemon thread, so a caller that first waits (on the API, on the disk)
    has it imported meanwhile. Drawing joins it first: two threads importing the same modules at once could see
    one another's half-imported modules."""
    thread = threading.Thread(target=_import_matplotlib, name="stage-plot-import", daemon=True)
    _preload.append(thread)
    thread.start()
    return thread


def plotted_metrics(comparison: StageComparison) -> list[str]:
    """The panels: the charted metrics with a curve (mean_reward first), else the first others."""
    with_curves = [m for m in comparison.metrics if comparison.curves.get(m)]
    charted = chart_metrics(with_curves) or with_curves
    return charted[:MAX_PANELS]


def _dashes(dash: str) -> Any:
    return (0, tuple(float(x) for x in dash.split())) if dash else "solid"


def _short(text: str) -> str:
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"


def _label(s: Any) -> str:
    return _short(s.label + (f" ({len(s.ids)} runs)" if s.band else "") + (" = tie" if s.ties else ""))


def _band(points: list[list[float]], low: int, high: int) -> list[tuple[float, float]]:
    """A band's outline: along its lows, back along its highs."""
    return [(p[0], p[low]) for p in points] + [(p[0], p[high]) for p in reversed(points)]


def _draw_bands(ax: Any, chart: StageChart, order: list[Any]) -> None:
    """The rest's band and each group's band, as the polygons of one collection."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgba

    bands = [(_band(chart.rest_band, 1, 2), to_rgba(REST_COLOUR, 0.25))] if chart.rest_band else []
    bands += [(_band(s.points, 2, 3), to_rgba(s.colour, 0.15)) for s in order if s.band]
    if bands:
        ax.add_collection(PolyCollection([b[0] for b in bands], facecolors=[b[1] for b in bands], linewidths=0))


def _draw_curve(ax: Any, s: Any) -> Any:
    """One shown curve (markers when it has few points); its line for the legend."""
    (line,) = ax.plot([p[0] for p in s.points], [p[1] for p in s.points], color=s.colour,
                      linestyle=_dashes(s.dash), linewidth=1.8, marker="o" if len(s.points) <= 30 else None,
                      markersize=3)
    return line


def _panel(ax: Any, chart: StageChart) -> None:
    """One metric's panel. Every band (the rest's, each group's) is one polygon of one collection, and the legend
    is given its entries: 9 `fill_between` calls and the legend's search of the axes' artists were a fifth of
    the drawing."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    order = sorted(reversed(chart.shown), key=lambda s: bool(s.dash))  # the best last; a tie dashed on top
    _draw_bands(ax, chart, order)
    entries = [(_draw_curve(ax, s), _label(s)) for s in order]
    entries.reverse()  # best first, the rest's band last
    if chart.rest_band:
        entries.append((Patch(facecolor=REST_COLOUR, alpha=0.25, linewidth=0), _short(chart.rest_label)))
    # Placed at the top of the axes (where the automatic placement puts it: nothing is drawn above the axes),
    # not measured against the ticks at each draw.
    ax.set_title(chart.metric + (" (mean of seeds, band: lowest–highest)" if chart.grouped else ""), fontsize=10,
                 y=1.0)
    ax.set_xlabel("step")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(True, alpha=0.3)
    if entries:
        ax.legend([e[0] for e in entries], [e[1] for e in entries], fontsize="x-small", loc="lower right",
                  framealpha=0.85)


def plot_digest(comparison: StageComparison) -> str:
    """What the plot is drawn from, as a digest: the comparison and this module's drawing version."""
    body = comparison.model_dump_json().encode()
    return hashlib.sha256(f"stage plot {PLOT_VERSION}\n".encode() + body).hexdigest()


def digest_of(path: Path) -> str:
    """The digest an existing plot was drawn from (its PNG text chunk), '' when it has none or is unreadable.
    Read from the file's head without decoding the image (the chunk is written before the pixels)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return ""
    at = head.find(DIGEST_KEY.encode() + b"\0")
    if not head.startswith(b"\x89PNG") or at < 0:
        return ""
    start = at + len(DIGEST_KEY) + 1
    value = head[start:start + 64]
    return value.decode("ascii", "replace") if len(value) == 64 else ""


def _ascii_only(comparison: StageComparison, charts: list[StageChart]) -> bool:
    """Every text drawn (the stage's name, the curves' labels) is ASCII."""
    return all(text.isascii() for chart in charts for text in [comparison.stage, *(s.label for s in chart.shown)])


def render_stage_png(comparison: StageComparison, digest: str = "") -> bytes | None:
    """The PNG (`digest` in a text chunk, see write_stage_plot), or None when no experiment has a curve."""
    metrics = plotted_metrics(comparison)
    if not metrics:
        return None
    for thread in _preload:
        thread.join()
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib is slow to import
    from matplotlib.figure import Figure

    charts = [stage_chart(comparison, m) for m in metrics]
    if not _ascii_only(comparison, charts):
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
    return _png(canvas, digest)


def _png(canvas: Any, digest: str) -> bytes:
    from PIL import Image
    from PIL.PngImagePlugin import PngInfo

    width, height = canvas.get_width_height()
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buf = BytesIO()
    info = PngInfo()
    if digest:
        info.add_text(DIGEST_KEY, digest)
    image.convert("RGB").save(buf, format="png", compress_level=1, dpi=(DPI, DPI), pnginfo=info)
    return buf.getvalue()


def write_stage_plot(path: Path, comparison: StageComparison) -> bool:
    """Write the plot; False (and nothing written) when there is nothing to draw. A plot already at `path` drawn
    from the very same comparison (the stage's report the outbox wrote when the stage finished, or an earlier
    `compare`) is kept, not drawn again: drawing is most of what `compare --stage` costs."""
    if not plotted_metrics(comparison):
        return False
    digest = plot_digest(comparison)
    if digest_of(path) == digest:
        return True
    png = render_stage_png(comparison, digest)
    if png is None:
        return False
    atomic_write_bytes(path, png)
    return True
