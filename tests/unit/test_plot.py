"""The reused plot figure draws exactly what a fresh figure draws, whatever it drew before."""

from __future__ import annotations

import math
from io import BytesIO

import pytest

from ajet_runner.workers.report import normalize_evaluations
from ajet_runner.workers.report.evaluations import Eval
from ajet_runner.workers.report.plot import PlotCanvas, draw_background, render_png


def _evals(steps: int, datasets: tuple[str, ...] = ("main",), rates: tuple[int, ...] = (1, 4),
           scale: float = 1.0, gaps: bool = False, start: int = 0) -> list[Eval]:
    raw = []
    for s in range(steps):
        for d in datasets:
            metrics: dict[str, float] = {"mean_reward": scale * 0.1 * s + 0.05}
            metrics |= {f"task_pass_rate@{k}": 0.2 + s / (20 * k) for k in rates}
            if gaps and s % 2:
                metrics["mean_reward"] = math.nan
            raw.append({"step": start + 10 * s, "dataset": d, "metrics": metrics})
    return normalize_evaluations(raw)


SHAPES = [
    ("three steps", _evals(3)),
    ("one step (a window around it)", _evals(1, start=40)),
    ("two datasets, three rates, big values", _evals(30, ("a", "b"), (1, 2, 4), scale=100.0)),
    ("no pass rate (an empty panel with a note)", _evals(2, rates=())),
    ("NaN rewards every other step", _evals(5, gaps=True)),
    ("one step, two datasets", _evals(1, ("x", "y"))),
    ("no mean_reward at all", [Eval(step=s, dataset="", metrics={"task_pass_rate@1": 0.5}) for s in (0, 5)]),
    ("many steps, tiny values", _evals(200, scale=0.001)),
    ("three steps again", _evals(3)),
]


def test_reused_figure_draws_what_a_fresh_figure_draws() -> None:
    for i, (what, points) in enumerate(SHAPES):
        title = f"exp{i}: {'completed' if i % 2 else 'failed'}"
        assert render_png(points, title) == PlotCanvas().draw(points, title), what


def test_a_background_drawn_earlier_gives_the_full_drawing_with_its_title() -> None:
    backgrounds = [draw_background(points) for _, points in SHAPES]  # as a watched run draws them, in turn
    for i, ((what, points), background) in enumerate(zip(SHAPES, backgrounds, strict=True)):
        title = f"exp{i}: {'completed' if i % 2 else 'timed_out'}"
        assert render_png(points, title, background) == PlotCanvas().draw(points, title), what


def test_a_background_of_other_evaluations_is_not_used() -> None:
    early, final = SHAPES[0][1], [*SHAPES[0][1], *_evals(1, start=30)]
    stale = draw_background(early)
    assert render_png(final, "e: completed", stale) == PlotCanvas().draw(final, "e: completed")
    assert render_png(final, "e: completed", stale) != render_png(early, "e: completed", stale)


def test_a_failed_drawing_leaves_no_broken_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    render_png(SHAPES[2][1], "before")

    def boom(*_a: object, **_k: object) -> None:
        raise RuntimeError("renderer gone")

    with monkeypatch.context() as m:
        m.setattr("matplotlib.backends.backend_agg.FigureCanvasAgg.draw", boom)
        with pytest.raises(RuntimeError):
            render_png(SHAPES[0][1], "during")
    assert render_png(SHAPES[0][1], "after") == PlotCanvas().draw(SHAPES[0][1], "after")


def test_png_is_opaque_rgb_of_the_figure_size() -> None:
    from PIL import Image

    image = Image.open(BytesIO(render_png(SHAPES[0][1], "x")))
    assert image.format == "PNG" and image.mode == "RGB" and image.size == (1200, 480)


def test_plot_ahead_draws_the_latest_evaluations_and_never_raises() -> None:
    from ajet_runner.statemachine.models import Evaluation
    from ajet_runner.workers.report.plot_preload import PlotAhead

    ahead = PlotAhead(min_interval=0)
    assert ahead.background() is None
    evaluations = [Evaluation(step=s, dataset="", metrics={"mean_reward": 0.1 * s}) for s in range(3)]
    ahead.update(evaluations[:1])
    ahead.update(evaluations)  # while the first drawing may be under way: the newest wins
    background = ahead.background()
    points = normalize_evaluations([e.model_dump() for e in evaluations])
    assert background is not None and background.points == tuple(points)
    assert render_png(points, "e: completed", background) == PlotCanvas().draw(points, "e: completed")
    ahead.update([object()])  # not an evaluation: ignored, the last drawing stays
    assert ahead.background() is background


def test_plot_ahead_starts_at_most_one_drawing_per_interval_and_the_next_update_draws_the_newest() -> None:
    from ajet_runner.statemachine.models import Evaluation
    from ajet_runner.workers.report.plot_preload import PlotAhead

    now = [100.0]
    ahead = PlotAhead(min_interval=20.0, clock=lambda: now[0])
    evaluations = [Evaluation(step=s, dataset="", metrics={"mean_reward": 0.1 * s}) for s in range(4)]
    points = [normalize_evaluations([e.model_dump() for e in evaluations[:n]]) for n in range(5)]
    ahead.update(evaluations[:1])  # the first drawing starts at once
    assert ahead.background().points == tuple(points[1])  # type: ignore[union-attr]
    now[0] += 19.0
    ahead.update(evaluations[:2])  # inside the interval: not drawn
    ahead.update(evaluations[:3])
    assert ahead.background().points == tuple(points[1])  # type: ignore[union-attr]
    now[0] += 1.0
    ahead.update(evaluations[:4])  # the interval has passed: the newest is drawn
    assert ahead.background().points == tuple(points[4])  # type: ignore[union-attr]
