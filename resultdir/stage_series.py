"""What a stage chart draws for one metric, shared by `stage_plot.png` and the console's stage chart, so
both show the same picture at 4 runs and at 200.

- When seeds differ, one series per group of runs that share every compared value: the mean curve with a
  band from the lowest to the highest run (stage_stats.group_curves). Otherwise one series per run.
- At most TOP_N series get a colour and a legend entry: the best by their final value. The rest are drawn
  as one grey band (lowest to highest of them at each step) named "the other N", never as N legend entries.
- Series whose curves are identical are named as ties, and drawn with different dashes so none hides the
  other.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ajet_runner.resultdir.palette import PALETTE
from ajet_runner.statemachine.comparison.compare import Row, StageComparison
from ajet_runner.statemachine.metric_vocabulary import higher_is_better

__all__ = ["TOP_N", "Series", "StageChart", "stage_chart"]

TOP_N = 8  # series drawn in colour with a legend entry; the rest share one band
DASHES = ("", "6 3", "2 2", "8 3 2 3")  # SVG stroke-dasharray; matplotlib gets the same as on/off lengths


@dataclass
class Series:
    label: str  # what differs (`lr=1e-6, temperature=0.8`), or the run's id when nothing does
    ids: list[str]  # the runs it stands for (one, or a group's)
    points: list[list[float]]  # [step, value] for a run; [step, mean, low, high, runs] for a group
    colour: str = ""
    dash: str = ""
    final: float | None = None
    ties: list[str] = field(default_factory=list)  # labels of series with the very same curve

    @property
    def band(self) -> bool:
        return bool(self.points) and len(self.points[0]) > 2


@dataclass
class StageChart:
    metric: str
    grouped: bool  # series are groups of seeds (mean and band)
    shown: list[Series]
    rest: list[Series]  # drawn as one grey band
    rest_band: list[list[float]]  # [step, low, high] over every curve of `rest`

    @property
    def rest_label(self) -> str:
        runs = sum(len(s.ids) for s in self.rest)
        what = f"{len(self.rest)} groups ({runs} runs)" if self.grouped else f"{runs} runs"
        return f"the other {what}: range"


def _series(c: StageComparison, metric: str) -> tuple[bool, list[Series]]:
    groups = c.group_curves.get(metric) or []
    if groups:
        return True, [Series(label=g.label, ids=g.members, points=g.points, final=g.final_mean) for g in groups
                      if g.points]
    curves = c.curves.get(metric) or {}
    labels = [r.label for r in c.rows]
    out = []
    for row in c.rows:
        pts = curves.get(row.id) or []
        if pts:
            out.append(Series(label=_run_label(row, labels), ids=[row.id], points=pts, final=_final(row, metric)))
    return False, out


def _final(row: Row, metric: str) -> float | None:
    """The run's final value of `metric` (None when it has none)."""
    values = row.metrics.get(metric)
    return values.final if values is not None else None


def _run_label(row: Row, labels: list[str]) -> str:
    """A run's label, with its id when another run has the same label; the id alone when it has none."""
    if labels.count(row.label) == 1:
        return row.label
    return f"{row.label} ({row.id})" if row.label else row.id


def stage_chart(c: StageComparison, metric: str, top_n: int = TOP_N) -> StageChart:
    """The series of `metric`, best final first, split into the shown ones and the rest."""
    grouped, series = _series(c, metric)
    sign = 1 if not higher_is_better(metric) else -1
    series.sort(key=lambda s: (s.final is None, sign * (s.final or 0.0)))
    shown, rest = series[:top_n], series[top_n:]
    _style(shown)
    return StageChart(metric=metric, grouped=grouped, shown=shown, rest=rest, rest_band=_rest_band(rest))


def _style(shown: list[Series]) -> None:
    """A colour per shown series, in order; series with the very same curve get different dashes and name
    each other (`ties`), so none hides another."""
    seen: dict[str, list[Series]] = {}
    for s in shown:
        seen.setdefault(repr([p[:2] for p in s.points]), []).append(s)
    for i, s in enumerate(shown):
        s.colour = PALETTE[i % len(PALETTE)]
        twins = seen[repr([p[:2] for p in s.points])]
        s.ties = [t.label for t in twins if t is not s]
        s.dash = DASHES[twins.index(s) % len(DASHES)]


def _rest_band(rest: list[Series]) -> list[list[float]]:
    """[step, low, high] over the series not shown (a group's own band included), by step."""
    by_step: dict[float, list[float]] = {}
    for s in rest:
        for p in s.points:
            lows = p[2:4] if len(p) > 2 else p[1:2]
            by_step.setdefault(p[0], []).extend(lows)
    return [[step, min(vs), max(vs)] for step, vs in sorted(by_step.items())]
