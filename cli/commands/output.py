"""How the CLI prints: exit codes, tables, JSON, and one-line errors.

Tables are for people on a terminal; when stdout is not a terminal they become plain
tab-separated lines (a header line, then one line per row, every value whole), so `cut`,
`grep` and `awk` see full ids. Lines meant to be copied (commands, paths) are printed with
`copyable`, never wrapped. Colours follow rich, which honours NO_COLOR.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

# Exit codes of every client command (README "CLI client").
OK = 0
FAILED = 1  # the thing itself failed or was refused (rejected blueprint, unknown id, failed run)
USAGE = 2  # bad usage or missing input (no such file, no token, refused token)
UNREACHABLE = 3  # cannot reach the API, or it cannot serve (5xx), within the reconnect limit
INTERRUPTED = 130


def is_terminal() -> bool:
    return sys.stdout.isatty()


def err(message: str) -> None:
    """One line on stderr."""
    typer.echo(" ".join(message.split("\n")), err=True)


def copyable(text: str) -> None:
    """A line to copy and paste: printed as is, never wrapped or styled."""
    typer.echo(text)


def echo_json(value: Any, *, lines: bool = False) -> None:
    """JSON on stdout: indented, or one compact object per line (`lines`)."""
    typer.echo(json.dumps(value, default=str, ensure_ascii=False, indent=None if lines else 2))


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


def print_table(columns: Sequence[str], rows: Iterable[Sequence[Any]], *, console: Console | None = None,
                shrink: Sequence[str] = ()) -> None:
    """A rich table on a terminal, else tab-separated lines with a header.

    On a terminal only the `shrink` columns (free text such as a purpose) may be cut with an
    ellipsis to fit; ids, states, names and numbers are always whole.
    """
    rows = [[cell(v) for v in row] for row in rows]
    if not is_terminal():
        typer.echo("\t".join(columns))
        for row in rows:
            typer.echo("\t".join(v.replace("\t", " ") for v in row))
        return
    table = Table(show_lines=False)
    for i, name in enumerate(columns):
        if name in shrink:
            table.add_column(name, no_wrap=True, overflow="ellipsis", min_width=min(12, len(name) + 4))
            continue
        widest = max([len(name), *(len(r[i]) for r in rows)])
        table.add_column(name, no_wrap=True, min_width=widest, overflow="fold")
    for row in rows:
        table.add_row(*row)
    (console or Console()).print(table, soft_wrap=True, crop=False)
