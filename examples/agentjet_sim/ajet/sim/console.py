"""Console output shaped like a real AgentJet run: loguru lines, Ray prefixes, tqdm bars.

Every line goes out in one `write` call and is flushed at once, so a reader tailing the
pane or a pipe never sees half a line, even when a signal stops the process.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
from collections.abc import Iterable, Mapping
from typing import TextIO

RESET = "\x1b[0m"
BOLD = "\x1b[1m"
GREEN = "\x1b[32m"
YELLOW = "\x1b[33m"
RED = "\x1b[31m"
CYAN = "\x1b[36m"
BLUE = "\x1b[34m"

_LEVEL_COLOURS = {
    "DEBUG": BLUE,
    "INFO": BOLD,
    "SUCCESS": GREEN + BOLD,
    "WARNING": YELLOW + BOLD,
    "ERROR": RED + BOLD,
}


def colour_enabled() -> bool:
    """Mirror the real launcher: LOGURU_COLORIZE=NO (or NO_COLOR) turns colours off."""
    if os.environ.get("NO_COLOR"):
        return False
    return os.environ.get("LOGURU_COLORIZE", "YES").upper() not in ("NO", "0", "FALSE")


def paint(text: str, colour: str) -> str:
    return f"{colour}{text}{RESET}" if colour_enabled() else text


def emit(line: str, stream: TextIO | None = None) -> None:
    """Write one whole line and flush it."""
    out = stream if stream is not None else sys.stdout
    out.write(line + "\n")
    out.flush()


def emit_lines(lines: Iterable[str], prefix: str = "", stream: TextIO | None = None) -> None:
    for line in lines:
        emit(prefix + line, stream)


def log(level: str, message: str, where: str = "ajet.launcher:main:142") -> None:
    """A loguru-formatted line on stderr, as the real launcher prints them."""
    now = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    colour = _LEVEL_COLOURS.get(level, "")
    module, func, line = (where.split(":") + ["", ""])[:3]
    for i, text in enumerate(message.splitlines() or [""]):
        if i == 0:
            emit(
                f"{paint(now, GREEN)} | {paint(f'{level:<8}', colour)} | "
                f"{paint(module, CYAN)}:{paint(func, CYAN)}:{paint(line, CYAN)} - {paint(text, colour)}",
                sys.stderr,
            )
        else:
            emit(paint(text, colour), sys.stderr)


def ray_prefix(actor: str, pid: int) -> str:
    """The prefix Ray puts before lines forwarded from an actor (coloured unless disabled)."""
    text = f"({actor} pid={pid})"
    if os.environ.get("RAY_COLOR_PREFIX", "1") == "0" or not colour_enabled():
        return text + " "
    return f"{CYAN}{text}{RESET} "


def ray(actor: str, pid: int, message: str) -> None:
    prefix = ray_prefix(actor, pid)
    for text in message.splitlines() or [""]:
        emit(prefix + text)


def box(mapping: Mapping[str, object], header: str = "") -> list[str]:
    """A framed key/value table like the real launcher's print_dict."""
    rows = [(str(k), str(v)) for k, v in mapping.items()]
    kw = max([len(k) for k, _ in rows] + [3])
    vw = max([len(v) for _, v in rows] + [len(header) - kw - 3, 5])
    top = "┏" + "━" * (kw + 2) + "┳" + "━" * (vw + 2) + "┓"
    lines = []
    if header:
        lines.append(f"{header:^{kw + vw + 7}}")
    lines.append(top)
    for k, v in rows:
        lines.append(f"┃ {k:<{kw}} ┃ {v:<{vw}} ┃")
    lines.append("┗" + "━" * (kw + 2) + "┻" + "━" * (vw + 2) + "┛")
    return lines


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_bar(label: str, n: int, total: int, elapsed: float, done_here: int) -> str:
    """One tqdm-style line: `Training Progress:  40%|████      | 4/10 [00:08<00:12,  2.00s/it]`."""
    total = max(total, 1)
    frac = min(n / total, 1.0)
    width = 10
    full = int(frac * width)
    bar = "█" * full + " " * (width - full)
    rate = elapsed / done_here if done_here else 0.0
    remaining = rate * (total - n)
    speed = f"{rate:5.2f}s/it" if rate >= 1 or rate == 0 else f"{1 / rate:5.2f}it/s"
    return f"{label}: {int(frac * 100):3d}%|{bar}| {n}/{total} [{_clock(elapsed)}<{_clock(remaining)}, {speed}]"
