"""How the CLI prints: exit codes, tables, JSON, and one-line errors.

Tables are for people on a terminal; when stdout is not a terminal they become plain
tab-separated lines (a header line, then one line per row, every value whole), so `cut`,
`grep` and `awk` see full ids. Nothing printed to a pipe is ever wrapped: rich consoles made
here have `soft_wrap` on when stdout is not a terminal. On a terminal a table always fits its
width: the free-text columns (a purpose, a reason) are capped and folded onto more lines, the
fixed ones (ids, states, names, numbers, times) are never cut; when even those do not fit side
by side, each row is printed as a block of `column  value` lines instead. Errors go to stderr,
always. Colours follow rich, which honours NO_COLOR.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import typer
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

# Exit codes of every command (docs/cli.md "Exit codes").
OK = 0
FAILED = 1  # the thing itself failed or was refused (rejected blueprint, unknown id, failed run)
USAGE = 2  # bad usage or missing/unreadable input (no such file, unknown node or state, no token, refused token)
UNREACHABLE = 3  # cannot reach the API, or it cannot serve (5xx), within the reconnect limit
INTERRUPTED = 130

FREE_TEXT_CAP = 60  # a free-text column is never wider than this on a terminal: long text folds
FREE_TEXT_MIN = 12  # ... nor narrower than this while the table is drawn as columns
GAP = 1  # characters between two columns of a table (SIMPLE_HEAD box, no padding)
FIELD_GAP = 2  # between a name and its value in `name  value` lines


def is_terminal() -> bool:
    return sys.stdout.isatty()


PIPE_WIDTH = 10_000  # a table printed to a pipe is as wide as its content: nothing in it is wrapped


def console(*, stderr: bool = False) -> Console:
    """A rich console for a command's output. On a terminal it wraps to the terminal's width; into a pipe
    or a file it never wraps: text lines are soft-wrapped (printed whole) and tables take their natural width."""
    if (sys.stderr if stderr else sys.stdout).isatty():
        return Console(stderr=stderr)
    return Console(stderr=stderr, soft_wrap=True, width=PIPE_WIDTH)


def err(message: str) -> None:
    """One line on stderr."""
    typer.echo(" ".join(message.split("\n")), err=True)


def fail(message: str, code: int = USAGE) -> typer.Exit:
    """One line on stderr and the exit to raise: `raise fail("error: ...")`."""
    err(message)
    return typer.Exit(code)


def copyable(text: str) -> None:
    """A line to copy and paste: printed as is, never wrapped or styled."""
    typer.echo(text)


def echo_json(value: Any, *, lines: bool = False) -> None:
    """JSON on stdout: indented, or one compact object per line (`lines`)."""
    typer.echo(json.dumps(value, default=str, ensure_ascii=False, indent=None if lines else 2))


def local_time(at: Any) -> str:
    """Epoch seconds as local `YYYY-MM-DD HH:MM:SS`; '' when not a time."""
    try:
        return datetime.fromtimestamp(float(at)).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return ""


def cell(value: Any) -> str:
    """A table cell: whole, on one line; lists joined by commas, nested values as compact JSON."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return ",".join(cell(v) for v in value) if value else "-"
    if isinstance(value, dict):
        return json.dumps(value, default=str, ensure_ascii=False, separators=(",", ":"))
    return " ".join(str(value).split())


def _fits(columns: Sequence[str], rows: list[list[str]], shrink: Sequence[str], width: int) -> bool:
    """Whether the fixed columns whole and each free-text column at its minimum fit side by side."""
    total = GAP * (len(columns) - 1)
    for i, name in enumerate(columns):
        widest = max([len(name), *(len(r[i]) for r in rows)])
        total += min(widest, FREE_TEXT_MIN) if name in shrink else widest
    return total <= width


def _share(wanted: dict[int, int], room: int) -> dict[int, int]:
    """Widths for the free-text columns: each gets what it wants when all fit in `room`, else the
    narrow ones get theirs and the wide ones split the rest evenly (never below FREE_TEXT_MIN)."""
    widths: dict[int, int] = {}
    left = dict(wanted)
    while left:
        even = max(FREE_TEXT_MIN, room // len(left))
        narrow = {i: w for i, w in left.items() if w <= even}
        if not narrow:
            widths.update(dict.fromkeys(left, even))
            break
        widths.update(narrow)
        room -= sum(narrow.values())
        left = {i: w for i, w in left.items() if i not in narrow}
    return widths


def _free_widths(columns: Sequence[str], widest: list[int], shrink: Sequence[str], width: int) -> dict[int, int]:
    """The width each free-text column gets (by index): the room the others leave, shared out."""
    fixed = sum(w for w, n in zip(widest, columns, strict=True) if n not in shrink)
    room = width - fixed - GAP * (len(columns) - 1)
    return _share({i: min(widest[i], FREE_TEXT_CAP) for i, n in enumerate(columns) if n in shrink}, room)


def _columns_table(columns: Sequence[str], rows: list[list[str]], shrink: Sequence[str], width: int) -> Table:
    widest = [max([len(n), *(len(r[i]) for r in rows)]) for i, n in enumerate(columns)]
    free = _free_widths(columns, widest, shrink, width)
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 0), collapse_padding=True)
    for i, name in enumerate(columns):
        if i in free:
            table.add_column(Text(name), overflow="fold", min_width=free[i], max_width=free[i])
        else:
            table.add_column(Text(name), no_wrap=True, overflow="fold", min_width=widest[i])
    for row in rows:
        table.add_row(*(Text(v) for v in row))  # Text: user text is never read as markup ([key=v] stays)
    return table


def _records(columns: Sequence[str], rows: list[list[str]]) -> Table:
    """Each row as a block of `column  value` lines (the values fold): for tables too wide for the terminal."""
    grid = Table.grid(padding=(0, FIELD_GAP))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for n, row in enumerate(rows):
        if n:
            grid.add_row("", "")
        for name, value in zip(columns, row, strict=True):
            grid.add_row(Text(name), Text(value))
    return grid


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, console: Console | None = None,
                shrink: Sequence[str] = ()) -> None:
    """A table that fits the terminal, else tab-separated lines with a header.

    On a terminal only the `shrink` columns (free text such as a purpose) are capped and folded;
    ids, states, names and numbers are always whole. When those cannot all stand side by side,
    every row becomes a block of `column  value` lines.
    """
    cells = [[cell(v) for v in row] for row in rows]
    if not is_terminal() and console is None:
        typer.echo("\t".join(columns))
        for row in cells:
            typer.echo("\t".join(v.replace("\t", " ") for v in row))
        return
    out = console or Console()
    width = out.width
    if _fits(columns, cells, shrink, width) or not cells:
        out.print(_columns_table(columns, cells, shrink, width), crop=False, highlight=False)
    else:
        out.print(_records(columns, cells), crop=False, highlight=False)


def print_fields(fields: Sequence[tuple[str, Any]], *, console: Console | None = None) -> None:
    """`key  value` lines: aligned and folded to the width on a terminal, `key<TAB>value` when piped."""
    shown = [(k, cell(v)) for k, v in fields]
    if not is_terminal() and console is None:
        for key, value in shown:
            typer.echo(f"{key}\t{value}")
        return
    grid = Table.grid(padding=(0, FIELD_GAP))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    for key, value in shown:
        grid.add_row(Text(key), Text(value))
    (console or Console()).print(grid, crop=False, highlight=False)
