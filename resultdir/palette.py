"""The colours of the evaluation charts: `reward_plot.png` (workers/report/plot.py) and the web console's
chart (service/ui/html.py) draw each metric in the same colour, so a person moving between the two reads
them the same way. Metric i (mean_reward first, then task_pass_rate@k by k) gets colour i; when a run has
several datasets, the datasets differ by marker and dash, never by colour.
"""

from __future__ import annotations

from ajet_runner.statemachine.metric_vocabulary import chart_metrics, is_headline

# matplotlib's "tab10", which the plot used before the console shared it; readable on white and distinct.
PALETTE: tuple[str, ...] = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                            "#7f7f7f", "#bcbd22", "#17becf")
DASHES: tuple[str, ...] = ("", "6 3", "2 2", "8 3 2 3")  # SVG stroke-dasharray per dataset

__all__ = ["DASHES", "PALETTE", "chart_metrics", "is_charted", "metric_colour"]


def is_charted(name: str) -> bool:
    """The headline metrics are drawn: mean_reward and task_pass_rate@k (not task_pass_rate@4-all-pass)."""
    return is_headline(name)


def metric_colour(metric: str, metrics: list[str]) -> str:
    """The colour of `metric` among the charted `metrics` (as `chart_metrics` orders them)."""
    return PALETTE[metrics.index(metric) % len(PALETTE)]
