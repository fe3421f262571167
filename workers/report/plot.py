"""`reward_plot.png`: mean_reward and task_pass_rate@k over steps.

The plot is drawn between a job's exit and `finish.flag`, so its cost is on that path. Two things
made it ~100 ms: building a fresh Figure with its two Axes (and their ticks, created lazily at the
first draw) for every plot, and PNG encoding through `savefig` (RGBA, zlib level 6). Here each
process draws on one reused figure (under a lock: drivers may share a process), cleared back to
what a fresh figure is — no lines, legends or notes, default limits, autoscale on — so the picture
is pixel for pixel the fresh one's (tests/unit/test_plot.py checks it across odd sequences), and
the opaque canvas is encoded as RGB at zlib level 1 (lossless either way; ~10 ms instead of ~18).

While a run is watched, `draw_background` draws its evaluations so far without the title (the
title carries the outcome, known only at the end), kept zlib-compressed (~70 KB instead
of 2.3 MB of pixels). At the end `render_png` given that background only pastes it and draws the
title when the evaluations are still exactly the ones drawn — the same pixels as a full drawing,
which is what it does otherwise (tests/unit/test_plot.py).
"""

from __future__ import annotations

import threading
import zlib
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from ajet_runner.resultdir.flag import atomic_write_bytes
from ajet_runner.resultdir.palette import chart_metrics, metric_colour
from ajet_runner.statemachine.metric_vocabulary import MEAN_REWARD, PASS_RATE_FAMILY, PASS_RATE_K
from ajet_runner.workers.report.evaluations import Eval, rate_metrics

SIZE_INCHES = (12, 4.8)
DPI = 100
MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
LINESTYLES = ["-", "--", ":", "-."]  # per dataset, as the console's dashes
PANELS = (MEAN_REWARD, PASS_RATE_K)
PNG_COMPRESS_LEVEL = 1  # of zlib's 0-9: ~8 ms less than the default 6 at 1200x480, ~5 % bigger

_lock = threading.Lock()
_canvas: PlotCanvas | None = None


@dataclass(frozen=True)
class Background:
    """The plot of `points` without its title: the canvas's RGBA pixels, zlib-compressed."""

    points: tuple[Eval, ...]
    size: tuple[int, int]
    pixels: bytes


class PlotCanvas:
    """A figure with the plot's two panels, reset before each drawing (see the module docstring)."""

    def __init__(self) -> None:
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib is slow to import
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator

        self.fig = Figure(figsize=SIZE_INCHES, dpi=DPI)
        self.canvas = FigureCanvasAgg(self.fig)
        self.axes = list(self.fig.subplots(1, 2))
        for ax, name in zip(self.axes, PANELS, strict=True):
            # Placed, not computed at each draw (~10 ms a plot, same pixels): a title at y=1.0 is where
            # the automatic placement puts it with no ticks on top; the y label is empty.
            ax.set_title(name, y=1.0)
            ax.yaxis.set_label_coords(0.0, 0.5)
            ax.set_xlabel("step")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.grid(True, alpha=0.3)
        # fixed margins: "constrained" layout cost ~60 ms per plot
        self.fig.subplots_adjust(left=0.05, right=0.985, top=0.85, bottom=0.11, wspace=0.14)

    def _reset(self) -> None:
        """Back to the state a fresh figure's panels are in before anything is plotted."""
        for ax in self.axes:
            for artist in [*ax.lines, *ax.texts]:
                artist.remove()
            if (legend := ax.get_legend()) is not None:
                legend.remove()
            ax.relim()  # no data: the data limits are null again
            ax.set_xlim(0.0, 1.0)  # a fresh Axes' view before autoscaling (also undoes a one-step window)
            ax.set_ylim(0.0, 1.0)
            ax.set_autoscale_on(True)

    def draw(self, points: list[Eval], title: str) -> bytes:
        """The PNG of `points` (every one has a step) under `title`."""
        self._plot(points)
        self.fig.suptitle(title).set_visible(True)
        self.canvas.draw()
        return _png(self.canvas)

    def background(self, points: list[Eval]) -> Background:
        """`points` drawn without the title (the figure's title is drawn last, over the panels, so
        pasting this and drawing the title gives the full drawing's pixels)."""
        self._plot(points)
        self.fig.suptitle("").set_visible(False)
        self.canvas.draw()
        return Background(tuple(points), self.canvas.get_width_height(),
                          zlib.compress(bytes(self.canvas.buffer_rgba()), 1))

    def paste(self, background: Background, title: str) -> bytes:
        """The PNG of `background` with `title` drawn on it."""
        import numpy as np

        renderer = self.canvas.get_renderer()
        np.asarray(self.canvas.buffer_rgba())[...] = np.frombuffer(
            zlib.decompress(background.pixels), dtype=np.uint8).reshape(background.size[1], background.size[0], 4)
        text = self.fig.suptitle(title)
        text.set_visible(True)
        text.draw(renderer)
        return _png(self.canvas)

    def _plot(self, points: list[Eval]) -> None:
        self._reset()
        ax_reward, ax_rate = self.axes
        rates = rate_metrics(points)
        charted = chart_metrics({m for e in points for m in e.metrics})
        datasets = list(dict.fromkeys(e.dataset for e in points))
        attempts = list(dict.fromkeys(e.attempt for e in points))

        def series(dataset: str, metric: str, attempt: int | None) -> tuple[list[int], list[float]]:
            pairs = [(e.step, e.get(metric)) for e in points if e.dataset == dataset and e.attempt == attempt]
            kept = [(s, v) for s, v in pairs if s is not None and v is not None]
            return [s for s, _ in kept], [v for _, v in kept]

        def draw_segment(dataset: str, attempt: int | None, style: dict[str, str], first: bool) -> None:
            """One attempt's curves of one dataset (the legend names each series once: `first`)."""
            xs, ys = series(dataset, MEAN_REWARD, attempt)
            if xs:
                ax_reward.plot(xs, ys, color=metric_colour(MEAN_REWARD, charted),
                               label=(dataset or MEAN_REWARD) if first else None, **style)
            for metric in rates:
                xs, ys = series(dataset, metric, attempt)
                if xs:
                    label = metric if len(datasets) == 1 else f"{metric} ({dataset or 'default'})"
                    ax_rate.plot(xs, ys, color=metric_colour(metric, charted), label=label if first else None,
                                 **style)

        def mark_start(attempt: int) -> None:
            first = min((e.step for e in points if e.attempt == attempt and e.step is not None), default=None)
            for ax in self.axes if first is not None else ():
                ax.axvline(first, color="#888888", linestyle=":", linewidth=1)
                ax.annotate(f"attempt {attempt}", (first, 1.0), xycoords=("data", "axes fraction"),
                            xytext=(2, -10), textcoords="offset points", fontsize="x-small", color="#555555")

        # One colour per metric, shared with the console's chart (resultdir/palette.py); datasets differ by
        # marker and line style. Each attempt is its own segment (never joined across a relaunch), and a
        # dotted line marks where each later attempt starts.
        for i, dataset in enumerate(datasets):
            style = {"marker": MARKERS[i % len(MARKERS)], "linestyle": LINESTYLES[i % len(LINESTYLES)]}
            for k, attempt in enumerate(attempts):
                draw_segment(dataset, attempt, style, k == 0)
        for attempt in [a for a in attempts[1:] if a is not None]:
            mark_start(attempt)
        self._finish_axes(points)

    def _finish_axes(self, points: list[Eval]) -> None:
        """Each panel's window and legend, or a note that it has nothing to show."""
        steps = sorted({e.step for e in points if e.step is not None})
        for ax, name in zip(self.axes, PANELS, strict=True):
            if len(steps) == 1:  # one evaluation: show it in a sensible window, not ±0.05 of a step
                ax.set_xlim(steps[0] - 1, steps[0] + 1)
            if ax.lines:
                ax.legend(fontsize="small")
            else:
                ax.text(0.5, 0.5, f"no {name} recorded", ha="center", va="center", transform=ax.transAxes)


def _png(canvas: Any) -> bytes:
    from PIL import Image

    width, height = canvas.get_width_height()
    image = Image.frombuffer("RGBA", (width, height), canvas.buffer_rgba(), "raw", "RGBA", 0, 1)
    buf = BytesIO()
    image.convert("RGB").save(buf, format="png", compress_level=PNG_COMPRESS_LEVEL, dpi=(DPI, DPI))
    return buf.getvalue()


def _on_canvas(draw: Any) -> Any:
    """`draw(canvas)` on this process's reused figure; a drawing that fails leaves no half-reset
    figure behind (the next one starts from a fresh figure)."""
    global _canvas
    with _lock:
        try:
            if _canvas is None:
                _canvas = PlotCanvas()
            return draw(_canvas)
        except BaseException:
            _canvas = None
            raise


def render_png(points: list[Eval], title: str, background: Background | None = None) -> bytes:
    """The plot's PNG: `background` with the title when it shows exactly `points`, else drawn in full."""
    def draw(canvas: PlotCanvas) -> bytes:
        if (background is not None and background.points == tuple(points)
                and background.size == canvas.canvas.get_width_height()):
            return canvas.paste(background, title)
        return canvas.draw(points, title)

    return _on_canvas(draw)


def draw_background(points: list[Eval]) -> Background:
    """`points` (every one with a step) drawn without the title, for `render_png` later."""
    return _on_canvas(lambda canvas: canvas.background(points))


def missing_plotting(exc: ModuleNotFoundError) -> str:
    """Why a plot was not drawn on an install without the plotting stack, and the way to get it."""
    return f"{exc.name or 'matplotlib'} is not installed here (pip install 'ajet-runner[node]' draws the plots)"


def plot_points(evals: list[Eval]) -> list[Eval]:
    """The evaluations the plot shows: those with a step."""
    return [e for e in evals if e.step is not None]


def nothing_to_plot(evals: list[Eval]) -> str:
    """Why `evals` make no plot ("" when they make one): known before anything is drawn."""
    points = plot_points(evals)
    if not points:
        return "no evaluation with a step was recorded"
    rates = rate_metrics(points)
    if not any(e.get(m) is not None for e in points for m in (MEAN_REWARD, *rates)):
        return f"no finite {MEAN_REWARD} or {PASS_RATE_FAMILY} value was recorded"
    return ""


def write_plot(path: Path, evals: list[Eval], title: str, background: Background | None = None) -> str:
    """Draw mean_reward and task_pass_rate@k over steps; return "" or why nothing was drawn.
    `background`: the same plot drawn while the run was watched (used only if still exact)."""
    why = nothing_to_plot(evals)
    if why:
        return why
    try:
        png = render_png(plot_points(evals), title, background)
    except ModuleNotFoundError as exc:  # a client-only install: the plotting stack is the [node] extra
        return missing_plotting(exc)
    atomic_write_bytes(path, png)
    return ""
