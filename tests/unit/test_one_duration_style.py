"""One style for every duration a person reads: the CLI, the console, the report, `check` and the reasons
they show all go through ajet_runner.statemachine.durations (`15s`, `3m 00s`, `1h 02m`, `of 5h`).

The grep looks at every string literal of that code (docstrings aside) and at the console's templates and
script for a number glued to a unit of its own (`{x:.0f}s`, `{{ v }} s`, `{m} min`), for hand-made
arithmetic (`// 60`, `divmod(s, 3600)`) and for rich's own clock columns.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_UNIT = r"(?:s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?)(?![A-Za-z0-9_])"
GLUED = re.compile(r"(?:\{[^{}]*\}|%[-\d.]*[sdfg])\s?" + _UNIT)  # f"{x:.0f}s", f"{m} min", printf's "%ss"
JINJA_GLUED = re.compile(r"\}\}\s?" + _UNIT)  # {{ value }} s
ARITHMETIC = re.compile(r"(?://|%)\s*(?:60|3600|86400)\b|divmod\([^)]*,\s*(?:60|3600|86400)\)")
RICH_CLOCKS = re.compile(r"Time(?:Elapsed|Remaining)Column")
TWO_DURATIONS = re.compile(r"\|\s*duration\b.*\|\s*duration\b")  # "10s / 3m": render.progress says "of"

PYTHON = ("cli/**/*.py", "service/*.py", "service/api/*.py", "service/ui/*.py", "statemachine/*.py",
          "statemachine/rules/*.py", "store/*.py", "workers/**/*.py")
CONSOLE = ("service/ui/templates/*.html", "service/ui/static/*.js")
THE_FORMATTER = REPO / "statemachine" / "durations.py"


def _strings(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string literal that is not a docstring."""
    found, before = [], None
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text(encoding="utf-8")).readline):
        if tok.type == tokenize.STRING and before not in (None, tokenize.INDENT, tokenize.DEDENT, tokenize.NEWLINE):
            found.append((tok.start[0], tok.string))
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            before = tok.type
    return found


def other_styles(path: Path) -> list[str]:
    """Every place in `path` that formats a duration its own way."""
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
    hits = []
    if path.suffix == ".py":
        for n, text in _strings(path):
            hits += [f"{where}:{n}: {m.group(0)!r} in {text[:80]}" for m in GLUED.finditer(text)]
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            hits += [f"{where}:{n}: {m.group(0)!r}" for p in (ARITHMETIC, RICH_CLOCKS) for m in p.finditer(code)]
        return hits
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        hits += [f"{where}:{n}: {m.group(0)!r}" for p in (JINJA_GLUED, TWO_DURATIONS, ARITHMETIC)
                 for m in p.finditer(line)]
    return hits


def _files(patterns: tuple[str, ...]) -> list[Path]:
    return sorted({p for pattern in patterns for p in REPO.glob(pattern) if p != THE_FORMATTER})


def test_every_cli_report_and_console_duration_has_one_style() -> None:
    files = _files(PYTHON + CONSOLE)
    assert len(files) > 100 and any(f.suffix == ".html" for f in files)
    hits = [hit for f in files for hit in other_styles(f)]
    assert not hits, "durations formatted outside statemachine/durations.py:\n" + "\n".join(hits)


@pytest.mark.parametrize("line", [
    'clock = f"{elapsed:,.0f}s / {max_s:,.0f}s"',  # the old watch bar
    'typer.echo(f" of {rec.max_seconds:.0f}s")',  # the old status
    'return f"{m} min {sec:02d} s"',  # the old report
    'shown = f"{format_duration(value)} ({value:g} s)"',  # the old check
    "return f'{secs // 60}m'",
    "m, sec = divmod(rest, 60)",
    "columns = (TimeElapsedColumn(),)",
    "wrapper = 'printf \"this pane closes in %ss\" $linger'",  # the old tmux wrapper's last line
])
def test_the_grep_sees_each_old_style(tmp_path: Path, line: str) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(f"def f(elapsed, max_s, rec, m, sec, value, secs, rest):\n    {line}\n", encoding="utf-8")
    assert other_styles(probe), line


@pytest.mark.parametrize("line", [
    "<dd>{{ e.elapsed_seconds | duration }}{% if e.max_seconds %} / {{ e.max_seconds | duration }}{% endif %}</dd>",
    "<td>{{ value | duration }} ({{ value }} s)</td>",
])
def test_the_grep_sees_the_old_console_styles(tmp_path: Path, line: str) -> None:
    page = tmp_path / "page.html"
    page.write_text(line + "\n", encoding="utf-8")
    assert other_styles(page), line
