"""Markdown and number formatting for the report and the repair log: never raises on odd values."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import Any

from ajet_runner.statemachine.durations import format_duration, format_limit
from ajet_runner.workers.report.report_consts import CELL_CHARS, CONTROL_RE, COUNT_METRICS, NA, PIPE_RE


def number(value: Any) -> float | None:
    """A metric value as float (NaN/inf kept), or None when it is not a number at all."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).strip().rstrip("%"))
    except ValueError:
        return None


def finite(value: Any) -> float | None:
    x = number(value)
    return x if x is not None and math.isfinite(x) else None


def fmt_value(value: Any, metric: str = "") -> str:
    """A metric for a person: counts as integers, rates and rewards with 4 decimals, else n/a."""
    x = finite(value)
    if x is None:
        return NA
    if metric.startswith(COUNT_METRICS) and x == int(x):
        return str(int(x))
    if x != 0 and (abs(x) >= 1e5 or abs(x) < 1e-3):
        return f"{x:.4g}"
    return f"{x:.4f}"


def fmt_delta(value: float | None) -> str:
    return NA if value is None else f"{value:+.4f}"


def fmt_time(value: Any) -> str:
    """Epoch seconds as `YYYY-MM-DD HH:MM:SS UTC`; strings are shown as they are."""
    if isinstance(value, str) and number(value) is None:
        return value or NA
    x = finite(value)
    if x is None:
        return NA
    try:
        return datetime.fromtimestamp(x, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    except (OverflowError, OSError, ValueError):
        return NA


def fmt_duration(seconds: Any) -> str:
    """A duration in the one style of every output (`15s`, `3m 00s`, `1h 02m`); n/a when unknown."""
    x = finite(seconds)
    return NA if x is None or x < 0 else format_duration(x)


def fmt_limit(seconds: Any) -> str:
    """A limit as a round figure (`5h`, `1h 30m`); n/a when unknown."""
    x = finite(seconds)
    return NA if x is None or x < 0 else format_limit(x)


def clean(text: Any) -> str:
    """Text without terminal escapes or control characters (newlines and tabs kept)."""
    return CONTROL_RE.sub("", str(text)) if text is not None else ""


def md_cell(value: Any, limit: int = CELL_CHARS) -> str:
    """Text for one line (a table cell or a list item): whitespace collapsed, long text shortened."""
    text = " ".join(clean(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def code_span(value: Any) -> str:
    """Inline code that survives backticks inside the text."""
    text = " ".join(clean(value).split())
    if not text:
        return NA
    ticks = "`" * (max((len(r) for r in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def fenced(text: str, lang: str = "text") -> list[str]:
    """A fenced block whose fence is longer than any backtick run inside it."""
    body = clean(text).rstrip("\n")
    ticks = "`" * max(3, max((len(r) for r in re.findall(r"`{3,}", body)), default=0) + 1)
    return [f"{ticks}{lang}", *body.split("\n"), ticks]


def _cell(markdown: Any) -> str:
    """Pipes escaped (GFM un-escapes them inside code spans in tables too); never empty."""
    return PIPE_RE.sub(r"\\|", str(markdown)) if markdown not in (None, "") else " "


def table(header: list[str], rows: Iterable[list[Any]]) -> list[str]:
    """A GFM table from cells that are already markdown (one line each)."""
    lines = ["| " + " | ".join(_cell(md_cell(h)) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def path_link(path: str, base: str) -> str:
    """A relative markdown link when `path` is inside `base` (the result dir), else the path as code."""
    if not path:
        return NA
    try:
        rel = os.path.relpath(os.path.abspath(path), os.path.abspath(base))
    except ValueError:
        rel = ""
    if rel and not rel.startswith(".."):
        return f"[{md_cell(rel)}](<{rel}>)"
    return code_span(path)
