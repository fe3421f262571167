"""A launch command as a bash syntax tree (bashlex), with the spans of every simple command.

bashlex is a port of bash's own grammar: it knows heredocs, subshells, `$(...)`, `<(...)`,
`${VAR:-a b}`, functions, `if`/`for`/`while`, and skips comments the way bash does. Where it
cannot read a command (it does not implement `case`, `[[ ]]`, `$((...))` or arrays), `parse`
raises `ShellSyntaxError` with bashlex's reason, and callers refuse what they cannot read.

Two repairs are applied before parsing, both keeping every character's position:
bashlex does not strip the quotes of a heredoc delimiter (`<<'EOF'` waits for a line
`'EOF'`), so `'EOF'` is parsed as `EOF` padded with spaces; the delimiter's quoting is
remembered, because it decides whether the body is expanded.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import bashlex
import bashlex.errors

__all__ = ["Command", "Heredoc", "ShellSyntaxError", "Word", "parse", "parse_with_substitutions", "unquote"]

_QUOTED_HEREDOC = re.compile(r"<<(-?)([ \t]*)(?:'([A-Za-z0-9_.-]+)'|\"([A-Za-z0-9_.-]+)\"|\\([A-Za-z0-9_.-]+))")
_EXPANSION_KINDS = frozenset({"parameter", "commandsubstitution", "processsubstitution", "arithmetic"})


class ShellSyntaxError(ValueError):
    """The command is not something bashlex can read with certainty."""


@dataclass(frozen=True)
class Word:
    """One word as written (`raw`, its span) and as bash sees it once unquoted (`value`)."""

    value: str
    raw: str
    start: int
    end: int
    expanded: bool  # holds an expansion bash resolves only at run time ($X, $(..), <(..), globs, braces)
    quoted_whole: bool  # one quoted string (`"$X"`): never split into several words


@dataclass(frozen=True)
class Heredoc:
    """A heredoc body (span of the body lines, terminator excluded) and whether bash expands it."""

    body: str
    start: int
    end: int
    literal: bool  # the delimiter was quoted: no expansion in the body


@dataclass
class Command:
    """A simple command: its words (assignments excluded), where it starts and what feeds or takes it."""

    words: list[Word]
    assignments: list[Word]
    start: int
    end: int
    heredocs: list[Heredoc] = field(default_factory=list)
    writes_file: bool = False  # stdout or stderr redirected to a file
    piped_in: bool = False  # not the first command of a pipeline
    piped_out: bool = False  # its output goes into another command


def _fix_heredoc_quotes(text: str) -> tuple[str, set[int]]:
    """`<<'EOF'` -> `<<EOF  ` (same length); returns the text and the positions of quoted delimiters."""
    quoted: set[int] = set()

    def swap(m: re.Match[str]) -> str:
        name = m.group(3) or m.group(4) or m.group(5)
        quoted.add(m.start())
        written = m.group(0)
        out = f"<<{m.group(1)}{m.group(2)}{name}"
        return out + " " * (len(written) - len(out))

    return _QUOTED_HEREDOC.sub(swap, text), quoted


def _children(node: Any) -> Iterator[Any]:
    for attr in ("parts", "list"):
        yield from getattr(node, attr, None) or []
    for attr in ("command", "output", "heredoc"):
        child = getattr(node, attr, None)
        if child is not None and hasattr(child, "kind"):
            yield child


def _has_expansion(node: Any) -> bool:
    stack = list(getattr(node, "parts", None) or [])
    while stack:
        n = stack.pop()
        if n.kind in _EXPANSION_KINDS:
            return True
        stack.extend(getattr(n, "parts", None) or [])
    return False


def _unquoted_metas(raw: str) -> str:
    """The characters of `raw` outside quotes and escapes (to spot globs and braces bash expands)."""
    out, i, n = [], 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\":
            i += 2
            continue
        if c in "'\"":
            j = raw.find(c, i + 1)
            i = n if j < 0 else j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def unquote(raw: str) -> str:
    """The value bash makes of one word without expansions: quotes and escapes removed.

    bashlex's own `word` is wrong for mixed quoting (`'a'"'"'b'`), so values come from here.
    """
    out: list[str] = []
    i, n = 0, len(raw)
    while i < n:
        c = raw[i]
        if c == "\\":
            if raw.startswith("\\\n", i):
                i += 2
                continue
            out.append(raw[i + 1 : i + 2])
            i += 2
        elif c == "'":
            j = raw.find("'", i + 1)
            j = n if j < 0 else j
            out.append(raw[i + 1 : j])
            i = j + 1
        elif c == '"':
            i += 1
            while i < n and raw[i] != '"':
                if raw[i] == "\\" and i + 1 < n and raw[i + 1] in '$`"\\\n':
                    if raw[i + 1] != "\n":
                        out.append(raw[i + 1])
                    i += 2
                    continue
                out.append(raw[i])
                i += 1
            i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _word(node: Any, text: str) -> Word:
    start, end = node.pos
    raw = text[start:end]
    bare = _unquoted_metas(raw)
    expanded = (
        _has_expansion(node)
        or "$'" in raw
        or "$\"" in raw
        or any(c in bare for c in "*?[")
        or ("{" in bare and ("," in bare or ".." in bare))
        or "`" in raw
        or "$" in bare
    )
    quoted_whole = len(raw) >= 2 and raw[0] == '"' and raw[-1] == '"' and raw.count('"') == 2
    return Word(node.word if expanded else unquote(raw), raw, start, end, expanded, quoted_whole)


def _heredoc_body(redirect: Any, text: str, quoted: set[int]) -> Heredoc | None:
    doc = getattr(redirect, "heredoc", None)
    if doc is None:
        return None
    start, end = doc.pos
    body = text[start:end]
    cut = body.rfind("\n")  # the value ends with the terminator line
    body_end = start + (cut + 1 if cut >= 0 else 0)
    return Heredoc(text[start:body_end], start, body_end, literal=redirect.pos[0] in quoted)


def _command(node: Any, text: str, quoted: set[int]) -> Command:
    words: list[Word] = []
    assignments: list[Word] = []
    heredocs: list[Heredoc] = []
    writes = False
    for part in node.parts:
        if part.kind == "word":
            words.append(_word(part, text))
        elif part.kind == "assignment":
            (words if words else assignments).append(_word(part, text))
        elif part.kind == "redirect":
            kind = part.type
            if kind in ("<<", "<<-"):
                doc = _heredoc_body(part, text, quoted)
                if doc is not None:
                    heredocs.append(doc)
            elif ">" in kind and not (kind.endswith("&") and isinstance(part.output, int)):
                target = getattr(part.output, "word", None)
                writes = writes or target not in (None, "/dev/null", "/dev/stdout", "/dev/stderr")
    return Command(words, assignments, node.pos[0], node.pos[1], heredocs, writes)


def _walk(node: Any, text: str, quoted: set[int], out: list[Command], substs: list[tuple[int, int]]) -> None:
    if node.kind in ("commandsubstitution", "processsubstitution"):
        substs.append(tuple(node.pos))
    if node.kind == "command":
        out.append(_command(node, text, quoted))
    if node.kind == "pipeline":
        commands = [p for p in node.parts if p.kind != "pipe"]
        for k, part in enumerate(commands):
            before = len(out)
            _walk(part, text, quoted, out, substs)
            for cmd in out[before:]:
                if cmd.start >= part.pos[0] and cmd.end <= part.pos[1]:
                    cmd.piped_in = cmd.piped_in or k > 0
                    cmd.piped_out = cmd.piped_out or k < len(commands) - 1
        return
    for child in _children(node):
        _walk(child, text, quoted, out, substs)


@lru_cache(maxsize=256)
def _parse_cached(text: str) -> tuple[tuple[Command, ...], tuple[tuple[int, int], ...]] | str:
    fixed, quoted = _fix_heredoc_quotes(text)
    try:
        trees = bashlex.parse(fixed)
    except (bashlex.errors.ParsingError, NotImplementedError, IndexError, AttributeError, TypeError,
            ValueError, AssertionError, KeyError, RecursionError) as exc:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        return detail[:300]
    out: list[Command] = []
    substs: list[tuple[int, int]] = []
    for tree in trees:
        _walk(tree, text, quoted, out, substs)
    return tuple(out), tuple(substs)


def parse(text: str) -> list[Command]:
    """Every simple command in `text`, at any depth (subshells, `$(...)`, functions, `if`, loops).

    Raises ShellSyntaxError with the reason when bashlex cannot read the text.
    """
    return parse_with_substitutions(text)[0]


def parse_with_substitutions(text: str) -> tuple[list[Command], list[tuple[int, int]]]:
    """`parse`, plus the spans of every `$(...)`, backtick and `<(...)` / `>(...)` (to tell comments in them)."""
    if not text.strip():
        return [], []
    found = _parse_cached(text)
    if isinstance(found, str):
        raise ShellSyntaxError(found)
    return list(found[0]), list(found[1])
