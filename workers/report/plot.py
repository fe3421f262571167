"""`reward_plot.png`: mean_reward and task_pass_rate@k over steps."""

from __future__ import annotations

from io import BytesIO
from pathlib import Path

from workers.finish import atomic_write_bytes
from workers.report.evaluations import Eval, rate_metrics


def write_plot(path: Path, evals: list[Eval], title: str) -> str:
    """Draw mean_reward and task_pass_rate@k over steps; return "" or why nothing was drawn."""
    points = [e for e in evals if e.step is not None]
    if not points:
        return "no evaluation with a step was recorded"
    rates = rate_metrics(points)
    datasets = list(dict.fromkeys(e.dataset for e in points))
    if not any(e.get(m) is not None for e in points for m in ("mean_reward", *rates)):
        return "no finite mean_reward or task_pass_rate value was recorded"

    from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: matplotlib is slow to import
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(12, 4.8), dpi=100)  # fixed margins: "constrained" layout cost ~60 ms per plot
    FigureCanvasAgg(fig)
    ax_reward, ax_rate = fig.subplots(1, 2)
    colors = [f"C{i % 10}" for i in range(len(datasets))]
    steps = sorted({e.step for e in points if e.step is not None})
    markers = ["o", "s", "^", "D", "v", "P", "X", "*"]

    def series(dataset: str, metric: str) -> tuple[list[int], list[float]]:
        pairs = [(e.step, e.get(metric)) for e in points if e.dataset == dataset]
        kept = [(s, v) for s, v in pairs if s is not None and v is not None]
        return [s for s, _ in kept], [v for _, v in kept]

    for color, dataset in zip(colors, datasets, strict=True):
        xs, ys = series(dataset, "mean_reward")
        if xs:
            ax_reward.plot(xs, ys, marker="o", color=color, label=dataset or "mean_reward")
        for i, metric in enumerate(rates):
            xs, ys = series(dataset, metric)
            if xs:
                label = metric if len(datasets) == 1 else f"{metric} ({dataset or 'default'})"
                ax_rate.plot(xs, ys, marker=markers[i % len(markers)], color=color, label=label,
                             alpha=1.0 - 0.5 * i / max(1, len(rates)))
    for ax, name in ((ax_reward, "mean_reward"), (ax_rate, "task_pass_rate@k")):
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if len(steps) == 1:  # one evaluation: show it in a sensible window, not ±0.05 of a step
            ax.set_xlim(steps[0] - 1, steps[0] + 1)
        ax.grid(True, alpha=0.3)
        if ax.lines:
            ax.legend(fontsize="small")
        else:
            ax.text(0.5, 0.5, f"no {name} recorded", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(title)
    fig.subplots_adjust(left=0.05, right=0.985, top=0.85, bottom=0.11, wspace=0.14)
    buf = BytesIO()
    fig.savefig(buf, format="png")
    atomic_write_bytes(path, buf.getvalue())
    return ""
