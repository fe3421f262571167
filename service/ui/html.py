"""Safe HTML from untrusted text: markdown (raw HTML off, links checked), diffs, and a small SVG chart.

Everything here escapes its input; templates add their own autoescaping on top.
"""

from __future__ import annotations

import math
import posixpath
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlsplit

from markdown_it import MarkdownIt
from markupsafe import Markup, escape

from ajet_runner.service.ui.console_data import SERVED_FILES
from ajet_runner.statemachine.durations import format_duration, format_limit, format_progress

PALETTE = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2")


def _diff_lines(code: str) -> str:
    out = []
    for line in code.split("\n"):
        cls = ("add" if line.startswith("+") and not line.startswith("+++") else
               "del" if line.startswith("-") and not line.startswith("---") else
               "hunk" if line.startswith("@@") else "")
        out.append(f'<span class="d-{cls}">{escape(line)}</span>' if cls else str(escape(line)))
    return "\n".join(out)


def _highlight(code: str, lang: str, _attrs: str) -> str:
    return _diff_lines(code) if lang in ("diff", "patch") else ""  # "" = markdown-it escapes it itself


def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False, "highlight": _highlight})
    md.enable("table")
    md.enable("strikethrough")
    return md


_MD = _markdown()


def _local_target(url: str, exp_id: str) -> str | None:
    """A relative link of a report: the console's URL for a file it serves, the log panel for a log, else None."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or url.startswith(("/", "#")):
        return url if parts.scheme in ("http", "https") or url.startswith("#") else None
    name = posixpath.normpath(parts.path)
    if name in SERVED_FILES:
        return f"/ui/experiments/{quote(exp_id, safe='')}/files/{name}"
    if name.endswith(".log"):
        return "#log"
    return None


def markdown(text: str, exp_id: str) -> Markup:
    """Render a result-dir markdown file: no raw HTML, links only to what the console serves or http(s)."""
    tokens = _MD.parse(text)
    for tok in tokens:
        for child in tok.children or []:
            attr = "href" if child.type == "link_open" else "src" if child.type == "image" else None
            if attr is None:
                continue
            target = _local_target(str(child.attrGet(attr) or ""), exp_id)
            if target is None:
                child.attrs.pop(attr, None)
            else:
                child.attrSet(attr, target)
                if attr == "href" and target.startswith("http"):
                    child.attrSet("rel", "noopener noreferrer nofollow")
    return Markup(_MD.renderer.render(tokens, _MD.options, {}))  # noqa: S704 - markdown-it escaped it (html off)


def duration(seconds: float | None) -> str:
    return "" if seconds is None else format_duration(seconds)


def limit(seconds: float | None) -> str:
    return "" if seconds is None else format_limit(seconds)


def progress(elapsed: float | None, max_seconds: float | None) -> str:
    """`3m 00s of 5h`, as the CLI prints it."""
    return "" if elapsed is None and not max_seconds else format_progress(elapsed, max_seconds)


def age(ts: float | None, now: float | None = None) -> str:
    return "" if not ts else format_duration(max(0.0, (now or time.time()) - ts)) + " ago"


def clock(ts: float | None) -> str:
    return "" if not ts else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z"


def number(value: Any, digits: int = 4) -> str:
    try:
        f = float(value)
    except (TypeError, ValueError):
        return "" if value is None else str(value)
    return f"{f:.{digits}f}" if math.isfinite(f) else str(f)


def _chart_series(evals: Iterable[dict[str, Any]]) -> dict[str, list[tuple[float, float]]]:
    series: dict[str, dict[float, float]] = {}
    datasets = {str(e.get("dataset") or "") for e in evals}
    for e in evals:
        try:
            step = float(e.get("step"))
        except (TypeError, ValueError):
            continue
        for key, value in (e.get("metrics") or {}).items():
            if key != "mean_reward" and not str(key).startswith("task_pass_rate@"):
                continue
            try:
                v = float(value)
            except (TypeError, ValueError):
                continue
            if not math.isfinite(v):
                continue
            name = f"{e.get('dataset')}: {key}" if len(datasets) > 1 else str(key)
            series.setdefault(name, {})[step] = v  # a step evaluated again (a relaunch) shows its latest value
    return {name: sorted(points.items()) for name, points in series.items()}


def chart(evals: list[dict[str, Any]], width: int = 640, height: int = 240) -> Markup:
    """mean_reward and task_pass_rate@k over steps as an inline SVG (no script, no external library)."""
    series = _chart_series(evals)
    if not series:
        return Markup('<p class="muted">No evaluation yet.</p>')
    pad_l, pad_r, pad_t, pad_b = 48, 12, 12, 28
    xs = [x for pts in series.values() for x, _ in pts]
    ys = [y for pts in series.values() for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys + [0.0]), max(ys + [1.0 if max(ys) <= 1 else max(ys)])
    x1 = x1 if x1 > x0 else x0 + 1
    y1 = y1 if y1 > y0 else y0 + 1

    def px(x: float) -> float:
        return pad_l + (x - x0) / (x1 - x0) * (width - pad_l - pad_r)

    def py(y: float) -> float:
        return height - pad_b - (y - y0) / (y1 - y0) * (height - pad_t - pad_b)

    parts = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="evaluations over steps">']
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        parts.append(f'<line x1="{pad_l}" x2="{width - pad_r}" y1="{py(y):.1f}" y2="{py(y):.1f}" class="grid"/>'
                     f'<text x="{pad_l - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.2f}</text>')
    for x in (x0, (x0 + x1) / 2, x1):
        parts.append(f'<text x="{px(x):.1f}" y="{height - 8}" text-anchor="middle">{x:g}</text>')
    legend = []
    for n, (name, pts) in enumerate(sorted(series.items())):
        colour = PALETTE[n % len(PALETTE)]
        pts = sorted(pts)
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        parts.append(f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>')
        parts += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3" fill="{colour}"><title>{escape(name)} '
                  f'step {x:g}: {y:.4f}</title></circle>' for x, y in pts]
        legend.append(f'<text x="{pad_l + 8}" y="{pad_t + 14 * (n + 1)}" fill="{colour}">{escape(name)}</text>')
    parts += legend
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - numbers and escaped names only
