"""The colours of the evaluation charts: `reward_plot.png` (workers/report/plot.py) and the web console's
chart (service/ui/html.py) draw each metric in the same colour, so a person moving between the two reads
them the same way. Metric i (mean_reward first, then task_pass_rate@k by k) gets colour i; when a run has
several datasets, the datasets differ by marker and dash, never by colour.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# matplotlib's "tab10", which the plot used before the console shared it; readable on white and distinct.
PALETTE: tuple[str, ...] = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                            "#7f7f7f", "#bcbd22", "#17becf")
DASHES: tuple[str, ...] = ("", "6 3", "2 2", "8 3 2 3")  # SVG stroke-dasharray per dataset
_RATE = re.compile(r"^task_pass_rate@(\d+)$")


def is_charted(name: str) -> bool:
    """mean_reward and task_pass_rate@k (not task_pass_rate@4-all-pass and the like) are drawn."""
    return name == "mean_reward" or _RATE.match(name) is not None


def chart_metrics(names: Iterable[str]) -> list[str]:
    """The charted metrics present in `names`, in colour order: mean_reward, then task_pass_rate@k by k."""
    present = set(names)
    by_k = sorted((int(m.group(1)), n) for n in present if (m := _RATE.match(n)))
    rates = [n for _, n in by_k]
    return (["mean_reward"] if "mean_reward" in present else []) + rates


def metric_colour(metric: str, metrics: list[str]) -> str:
    """The colour of `metric` among the charted `metrics` (as `chart_metrics` orders them)."""
    return PALETTE[metrics.index(metric) % len(PALETTE)]
