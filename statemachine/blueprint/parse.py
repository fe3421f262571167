"""Read an experiment blueprint (markdown, English or Chinese) into a `Blueprint`.

Blueprints are written by people and by LLM agents in many layouts. The parser:

1. tokenizes the markdown with markdown-it-py (`blueprint_doc`): which line is a heading (and its
   level), a list item, inside a code block, ...; a blueprint wrapped in a ```markdown fence or
   indented as a whole is unwrapped first;
2. finds the *markers*: lines that open a part — a heading, a list item, a bold or plain line or a
   table row that starts with a tag (`[exp_codebase_dir]`, `**exp_venv_exe**`, ...), or, for parts
   written without any tag, with a known label ("实验目的", "Launch command"); each marker's section
   runs to the next marker or the structural end of its block (`blueprint_tags`);
3. reads each part's value. A section whose body is a list of `- key: value` bullet fields (the
   research-lead skill's layout: `- description:`, `- path:`, `- command:`, `- hint:`, ...) gives
   exactly its value field; every other bullet, a heading's suffix and prose after the list go to
   the notes under the part's name. Any other section is read by the value heuristics
   (`blueprint_values`: a path, a YAML path, free text) and the command reader
   (`blueprint_command`: exactly the command block, or a refusal quoting the line that is not shell);
4. splits a swarm launch command the way the skills write it (server and client in one part) into
   `exp_swarm_server` and the client (`swarm_blueprint.split_swarm_command`).

Text in no part (and the notes part) is kept verbatim as `notes`. What the parser finds wrong is kept
in `Blueprint.parse_problems`, which `validate_blueprint` reports first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ajet_runner.statemachine.blueprint.checks import (
    BLUEPRINT_MAX_LINES,
    FIELD_MAX_CHARS,
    template_placeholders,
    validate_blueprint,
)
from ajet_runner.statemachine.blueprint.command_field import CommandRead, Piece, read_command
from ajet_runner.statemachine.blueprint.doc import Block, Doc, dedent, parse_doc, unwrap
from ajet_runner.statemachine.blueprint.host import FIELD as HOST_FIELD
from ajet_runner.statemachine.blueprint.host import resolve_host
from ajet_runner.statemachine.blueprint.parse_deadline import ParseDeadline
from ajet_runner.statemachine.blueprint.parse_deadline import check as check_deadline
from ajet_runner.statemachine.blueprint.swarm_blueprint import SwarmSplit, no_server_refusal, split_swarm_command
from ajet_runner.statemachine.blueprint.sweep import SWEEP_FIELD
from ajet_runner.statemachine.blueprint.tags import NOTES, label_at, late_tag, line_head, match_tag, tag_at
from ajet_runner.statemachine.blueprint.values import (
    PATH_PART_LINES,
    extract_text,
    na_value,
    notes_under_path,
    read_path,
)
from ajet_runner.statemachine.durations import DURATION_MAX_CHARS, parse_duration
from ajet_runner.statemachine.logs.first_step import first_step_clause, without_first_step_clause
from ajet_runner.statemachine.models import Blueprint, Level, Problem

__all__ = ["BLUEPRINT_MAX_LINES", "FIELD_MAX_CHARS", "PATH_PART_LINES", "PATH_PART_SECTIONS", "ParseDeadline",
           "parse_blueprint", "validate_blueprint", "load_blueprint", "template_placeholders"]

# Sections of one path part read for its value before the rest count as notes: nobody writes a part
# twenty times, and 2,000 repeats of "[exp_yaml_path] <no path>" took 120 ms, each read for a path.
PATH_PART_SECTIONS = 16
_PATH_FIELDS = ("exp_codebase_dir", "exp_venv_exe", "exp_yaml_path", "exp_result_dir", "exp_val_result_path")
_COMMAND_FIELDS = ("exp_launch_command", "exp_swarm_server")
_PSEUDO_LIST = re.compile(r"[ \t]*(?:(\d{1,3})[、．]|[•·])[ \t]*")
_SETEXT_LINE = re.compile(r" {0,3}(?:=+|-+)[ \t]*")
_RULE_LINE = re.compile(r"\s*([-*_=])\1{2,}\s*")

# The value fields of the bullet layout, per part (keys lowercased, a trailing number dropped:
# `content 1` -> `content`). Every other key (`description`, `hint`, `note`, `warning 2`, ...) is commentary.
_VALUE_KEYS: dict[str, frozenset[str]] = {
    "exp_purpose": frozenset({"purpose", "goal", "objective", "aim", "目的", "实验目的", "content"}),
    "exp_codebase_dir": frozenset({"dir", "directory", "path", "codebase", "code dir", "目录", "路径", "代码目录",
                                   "代码路径", "content"}),
    "exp_venv_exe": frozenset({"path", "python", "exe", "executable", "venv", "interpreter", "路径", "解释器",
                               "content"}),
    "exp_yaml_path": frozenset({"path", "yaml", "config", "file", "路径", "配置", "配置文件", "content"}),
    "exp_launch_command": frozenset({"command", "cmd", "命令", "content"}),
    "exp_result_dir": frozenset({"path", "dir", "directory", "路径", "目录", "content"}),
    "exp_max_time": frozenset({"time", "max time", "maxtime", "max_time", "duration", "limit", "时间", "最长时间",
                               "content"}),
    "exp_swarm_server": frozenset({"command", "cmd", "server", "命令", "服务端", "服务器", "content"}),
    "exp_val_result_path": frozenset({"path", "file", "路径", "content"}),
}
_SERVER_KEYS = frozenset({"server", "swarm server", "服务端", "服务器"})
_CLIENT_KEYS = frozenset({"client", "swarm client", "客户端"})


@dataclass
class _Marker:
    line: int
    field: str
    style: str  # heading | list | plain | table
    level: int = 0  # heading level
    indent: int = 0  # list indentation
    numbered: bool = False
    inline: str = ""
    by_tag: bool = True
    skip: int = 1  # lines from the marker line to its body (2 below a setext heading)


@dataclass(eq=False)  # compared by identity: `in` over a list of items stays O(1) per item with a set of them
class _Item:
    """One `- key: value` bullet of a part: its key, the value text on its first line, its lines."""

    key: str
    base: str  # the key lowercased, without a trailing number
    first: str
    start: int
    end: int


@dataclass
class _Parse:
    """What the parse collects."""

    doc: Doc
    deadline: float | None
    values: dict[str, str] = field(default_factory=dict)
    examples: dict[str, str] = field(default_factory=dict)
    notes: list[tuple[int, str]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    max_time_text: str = ""
    yaml_na: bool = False
    swarm_bullets: tuple[str, str] | None = None
    path_sections: dict[str, int] = field(default_factory=dict)

    def note(self, line: int, fld: str, text: str) -> None:
        text = text.strip("\n")
        if text.strip():
            self.notes.append((line, f"(under [{fld}]) {text}" if fld != NOTES else text))

    def error(self, fld: str, message: str) -> None:
        self.problems.append(Problem(level=Level.error, field=fld, message=message))

    def warning(self, fld: str, message: str) -> None:
        self.problems.append(Problem(level=Level.warning, field=fld, message=message))

    def tick(self) -> None:
        check_deadline(self.deadline)


# ---------------------------------------------------------------------------- markers


def _list_line(doc: Doc, i: int) -> tuple[int, bool, str] | None:
    """(indent, numbered, text after the marker) when line `i` starts a list item (markdown's, or a
    `1、` / `•` item markdown does not know), else None."""
    line = doc.lines[i]
    block = doc.item.get(i)
    if block is not None:
        s = line.lstrip(" \t")
        indent = len(line[: len(line) - len(s)].expandtabs(4))
        if block.ordered:
            digits = len(s) - len(s.lstrip("0123456789"))
            rest = s[digits + 1:]
        else:
            rest = s[1:]
        return indent, block.ordered, rest.strip()
    m = _PSEUDO_LIST.match(line)
    if m is not None and m.end() > len(line) - len(line.lstrip(" \t")):
        lead = line[: len(line) - len(line.lstrip(" \t"))]
        return len(lead.expandtabs(4)), m.group(1) is not None, line[m.end():].strip()
    return None


def _heading_text(doc: Doc, i: int) -> tuple[int, str, int] | None:
    """(level, text, lines it spans) when line `i` is a heading's text line."""
    level = doc.heading[i]
    if not level:
        return None
    if i + 1 < len(doc.lines) and doc.underline[i + 1]:
        return level, doc.lines[i].strip(), 2
    s = doc.lines[i].strip().lstrip("#").strip()
    body = s.rstrip("#")
    if body != s and (not body or body[-1].isspace()):
        s = body.strip()
    return level, s, 1


def _find_markers(doc: Doc, state: _Parse) -> list[_Marker]:
    """Every line that opens a part; lines are rejected on cheap checks first."""
    markers: list[_Marker] = []
    for i, line in enumerate(doc.lines):
        if i % 256 == 0:
            state.tick()
        if doc.code[i] or doc.underline[i] or not line.strip():
            continue
        marker = _marker_at(doc, i, line.strip())
        if marker is not None:
            markers.append(marker)
    return _tags_win(markers)


def _tags_win(markers: list[_Marker]) -> list[_Marker]:
    """A part opened by its tag anywhere outranks the same part found only by its label."""
    tagged = {m.field for m in markers if m.by_tag}
    return [m for m in markers if m.by_tag or m.field not in tagged]


def _marker_at(doc: Doc, i: int, rest: str) -> _Marker | None:
    """The part line `i` opens (a heading, a list item, a table row or a plain line), if any."""
    style, level, indent, numbered, skip = "plain", 0, 0, False, 1
    heading = _heading_text(doc, i)
    listed = _list_line(doc, i) if heading is None else None
    if heading is not None:
        style, (level, rest, skip) = "heading", heading
    elif listed is not None:
        style, (indent, numbered, rest) = "list", listed
    elif rest.startswith("|"):
        return _table_marker(i, rest)
    named = _part_named(rest, style, structural=style == "heading" or numbered or rest.startswith(("**", "__")))
    if named is None:
        return None
    hit, by_tag = named
    return _Marker(i, hit[0], style, level, indent, numbered, hit[1], by_tag, skip)


def _part_named(rest: str, style: str, structural: bool) -> tuple[tuple[str, str], bool] | None:
    """The (field, text after the name) a line's text opens, and whether by its tag; a structural line
    (heading, numbered item, bold start) may carry the tag at its end and its label without a colon."""
    head = line_head(rest)
    hit = tag_at(head, strict=style == "plain" and rest[:1] not in "*_`")
    if hit is None and structural:
        hit = late_tag(rest)  # "## 1. 实验目的 [exp_purpose]"
    if hit is not None:
        return hit, True
    hit = label_at(head, colon=not structural)
    return None if hit is None else (hit, False)


def _table_marker(i: int, rest: str) -> _Marker | None:
    """A table row whose first cell is a tag: its value is the other cells (or the tag's own text)."""
    cells = [c.strip() for c in rest.strip("|").split("|")]
    hit = match_tag(cells[0]) if cells else None
    if hit is None:
        return None
    value = " | ".join(c for c in cells[1:] if c) or hit[1]
    return _Marker(i, hit[0], "table", inline=value)


def _section_end(doc: Doc, m: _Marker, stop: int, last: bool) -> int:
    """Index where marker `m`'s section ends (exclusive), at most `stop`."""
    if m.style == "table":
        return m.line + 1
    has_content = bool(m.inline)
    blank_seen = False
    for j in range(m.line + m.skip, stop):
        if doc.code[j]:
            has_content, blank_seen = True, False
        elif not doc.lines[j].strip():
            blank_seen = True
        elif _closes_section(doc, m, j, after_gap=last and blank_seen and has_content):
            return j
        else:
            has_content, blank_seen = True, False
    return stop


def _closes_section(doc: Doc, m: _Marker, j: int, after_gap: bool) -> bool:
    """Whether text line `j` starts what follows `m`'s section: a heading at its level or above, a sibling
    list item, or (`after_gap`: the last part, past a blank line after its content) text not indented deeper."""
    level = doc.heading[j]
    if level and (m.style != "heading" or level <= m.level):
        return True
    if m.style == "list":
        listed = _list_line(doc, j)
        if listed is not None and listed[0] <= m.indent and listed[1] == m.numbered:
            return True
    line = doc.lines[j]
    # text after the last inline part, past a blank line, is not part of it
    return after_gap and m.style != "heading" and len(line) - len(line.lstrip()) <= m.indent


def _has_tags(lines: list[str]) -> bool:
    """Whether any line opens a part other than notes with a tag (the unwrap test: cheap, line by line)."""
    for line in lines:
        s = line.strip()
        if not s or "exp" not in s[:80].lower():
            continue
        s = s.lstrip("-*+•>#| \t")
        hit = match_tag(s, strict=True)
        if hit is not None and hit[0] != NOTES:
            return True
    return False


# ---------------------------------------------------------------------------- sections


def _pieces(doc: Doc, start: int, end: int) -> list[Piece]:
    """The lines of [start, end) as text lines and code blocks (a block once, at its first line)."""
    out: list[Piece] = []
    for j in range(start, end):
        if doc.code[j]:
            block = doc.code_at.get(j)
            if block is not None:
                out.append(("code", block))
        else:
            out.append(("text", doc.lines[j]))
    return out


def _key_of(text: str) -> tuple[str, str, str] | None:
    """(key, base key, value) of a `key: value` bullet's first line, else None."""
    s = text.strip()
    cut = -1
    for k, ch in enumerate(s[:40]):
        if ch in ":：":
            cut = k
            break
    if cut <= 0 or s[cut + 1: cut + 3] == "//":
        return None
    key = s[:cut].strip(" *_`")
    if not key or len(key.split()) > 4 or any(c in key for c in "/`$=[]()"):
        return None
    base = key.lower().rstrip("0123456789 ").strip()
    return key, base or key.lower(), s[cut + 1:].strip(" *_").strip()


def _field_items(doc: Doc, fld: str, start: int, end: int) -> tuple[list[_Item], int] | None:
    """The bullet fields that open a section body [start, end) and where their list ends, when the body
    starts with a `- key: value` list holding this part's value key (or `server`/`client`)."""
    j = start
    while j < end and not doc.lines[j].strip():
        j += 1
    lst = doc.list_of.get(j)
    if lst is None or j >= end:
        return None
    items = _key_items(doc, lst, end)
    keys = _VALUE_KEYS.get(fld, frozenset())
    if not items or not (_is_swarm_list(fld, items) or any(it.base in keys for it in items)):
        return None
    return items, min(lst.end, end)


def _key_items(doc: Doc, lst: Block, end: int) -> list[_Item]:
    """The `key: value` items of list `lst` before `end`; none when one of its items is not `key: value`."""
    items: list[_Item] = []
    for block in lst.children:
        if block.kind != "item" or block.start >= end:
            break
        listed = _list_line(doc, block.start)
        kv = _key_of(listed[2]) if listed is not None else None
        if kv is None:
            return []
        items.append(_Item(kv[0], kv[1], kv[2], block.start, min(block.end, end)))
    return items


def _item_rest(doc: Doc, item: _Item) -> list[int]:
    """Line indexes of an item after its first line, trailing blank lines dropped."""
    end = item.end
    while end > item.start + 1 and not doc.lines[end - 1].strip():
        end -= 1
    return list(range(item.start + 1, end))


def _item_text(doc: Doc, item: _Item, *, with_key: bool = True) -> str:
    """The item as a note: `key: value` and its following lines, dedented."""
    body = dedent("\n".join(doc.lines[j] for j in _item_rest(doc, item)))
    head = f"{item.key}: {item.first}".rstrip() if with_key else item.first
    return f"{head}\n{body}".rstrip() if body.strip() else head


def _value_lines(doc: Doc, item: _Item) -> str:
    """A text value: the first line's value and the following lines, each stripped, blank ones dropped."""
    lines = [item.first] + [doc.lines[j].strip() for j in _item_rest(doc, item)]
    return "\n".join(ln.strip() for ln in lines if ln.strip())


def _heading_suffix(text: str) -> bool:
    """A heading's words after its tag that comment on the part: `(only for classic mode…)`, `— absolute path`."""
    s = text.strip()
    return s[:1] in ("(", "（", "—", "–") or s.startswith(("- ", "-- "))


def _read_fields(state: _Parse, m: _Marker, items: list[_Item], list_end: int, end: int) -> None:
    doc, fld = state.doc, m.field
    if m.inline.strip():
        state.note(m.line, fld, m.inline)  # a heading suffix, or a label before the bullets
    swarm = _is_swarm_list(fld, items)
    wanted = (_SERVER_KEYS | _CLIENT_KEYS) if swarm else _VALUE_KEYS.get(fld, frozenset())
    values = [it for it in items if it.base in wanted]
    chosen = set(values)
    for it in items:
        if it not in chosen:
            state.note(it.start, fld, _item_text(doc, it))
    if list_end < end:
        rest = dedent("\n".join(doc.lines[list_end:end])).strip("\n")
        state.note(list_end, fld, rest)
    if swarm:
        _read_swarm_bullets(state, values)
    elif values:
        _read_value_fields(state, fld, values, items)


def _is_swarm_list(fld: str, items: list[_Item]) -> bool:
    """A launch command written as `- server:`/`- client:` bullets (swarm mode) rather than one value."""
    return fld == "exp_launch_command" and any(it.base in _SERVER_KEYS | _CLIENT_KEYS for it in items)


def _read_value_fields(state: _Parse, fld: str, values: list[_Item], items: list[_Item]) -> None:
    """The part's value from its value bullets (`values`, not empty); more than one is an error except
    where the part joins them (the purpose) or reads them together (the time limit)."""
    doc = state.doc
    if fld == "exp_purpose":
        state.values[fld] = "\n".join(_value_lines(doc, it) for it in values)
        return
    if fld == "exp_max_time":
        _read_max_time_fields(state, values, items)
        return
    if len(values) > 1:
        where = ", ".join(f"`{it.key}:` (line {it.start + 1})" for it in values)
        state.error(fld, f"{fld} has {len(values)} value fields ({where}): give one")
    first = values[0]
    if fld in _COMMAND_FIELDS:
        read = read_command(first.first, _pieces(doc, first.start + 1, first.end), fld)
        _keep_command(state, fld, first.start, read)
    elif fld in _PATH_FIELDS:
        _keep_path(state, fld, first.start, _value_lines(doc, first))
    else:
        state.values[fld] = _value_lines(doc, first)


def _read_max_time_fields(state: _Parse, values: list[_Item], items: list[_Item]) -> None:
    """`- time: 12 hours` (or the first `content N`); a first-step timeout in another bullet
    ("First step success timeout: 20 minutes") is kept with the max-time text for the watchdog."""
    doc, fld = state.doc, "exp_max_time"
    text = _value_lines(doc, values[0])
    chosen = set(values)
    for it in items:
        if it is values[0]:
            continue
        if it in chosen:
            state.note(it.start, fld, _item_text(doc, it))
        clause = first_step_clause(_value_lines(doc, it)[:DURATION_MAX_CHARS])
        if clause and not first_step_clause(text):
            text = f"{text.rstrip('.,;，；。')}. {clause}"
    state.values[fld] = state.max_time_text = text


def _read_swarm_bullets(state: _Parse, values: list[_Item]) -> None:
    doc, fld = state.doc, "exp_launch_command"
    servers = [it for it in values if it.base in _SERVER_KEYS]
    clients = [it for it in values if it.base in _CLIENT_KEYS]
    if len(servers) != 1 or len(clients) != 1:
        state.error(fld, f"{fld} needs exactly one `- server:` and one `- client:` field, found {len(servers)} "
                    f"and {len(clients)}")
        return
    server = read_command(servers[0].first, _pieces(doc, servers[0].start + 1, servers[0].end), "exp_swarm_server")
    client = read_command(clients[0].first, _pieces(doc, clients[0].start + 1, clients[0].end), fld)
    _keep_command(state, fld, clients[0].start, client)
    for line, note in ((servers[0].start, n) for n in server.notes):
        state.note(line, fld, note)
    if server.refusal:
        state.error("exp_swarm_server", server.refusal)
    state.swarm_bullets = (server.command, client.command)


def _keep_command(state: _Parse, fld: str, line: int, read: CommandRead) -> None:
    state.values[fld] = read.command
    for note in read.notes:
        state.note(line, fld, note)
    if read.refusal:
        state.error(fld, read.refusal)
    for warning in read.warnings:
        state.warning(fld, warning)


def _keep_path(state: _Parse, fld: str, line: int, raw: str) -> None:
    if fld == "exp_yaml_path" and na_value(raw.strip().split("\n", 1)[0]):
        state.yaml_na = True
        state.values[fld] = ""
        return
    read = read_path(raw, fld)
    if read.example_only:
        state.examples.setdefault(fld, read.value)
    else:
        state.values[fld] = read.value
    if read.remark:
        state.note(line, fld, read.remark)
    if read.dropped:
        state.error(fld, f"the path is not alone on its line {read.line.strip()!r}: it would be read as "
                    f"{read.value!r}, dropping {read.dropped!r}. Put the path alone on its line (in backticks if "
                    "spaces, brackets or backticks belong to it) and a remark in parentheses at the end of the "
                    "line or on a line of its own")


def _read_text_section(state: _Parse, m: _Marker, start: int, end: int) -> None:
    """A part written as text (labels, values on the next lines, a fence): the value heuristics."""
    doc, fld = state.doc, m.field
    inline = m.inline
    if m.style == "heading" and _heading_suffix(inline):
        state.note(m.line, fld, inline)
        inline = ""
    body = "\n".join(doc.lines[start:end])
    raw = f"{inline}\n{dedent(body)}".strip("\n") if inline else dedent(body).strip("\n")
    if fld == NOTES:
        state.notes.append((m.line, extract_text(raw, NOTES)))
    elif fld in _PATH_FIELDS:
        _read_path_text(state, fld, m.line, raw)
    elif fld in _COMMAND_FIELDS:
        _keep_command(state, fld, m.line, read_command(inline, _pieces(doc, start, end), fld))
    elif fld == "exp_max_time":
        state.values[fld] = state.max_time_text = _max_time_text(raw)
    else:
        state.values[fld] = extract_text(raw, fld)


def _read_path_text(state: _Parse, fld: str, line: int, raw: str) -> None:
    """A path part written as text: its path, the prose under it as a note; past PATH_PART_SECTIONS
    sections of the same part, the section is a note."""
    state.path_sections[fld] = seen = state.path_sections.get(fld, 0) + 1
    if seen > PATH_PART_SECTIONS:
        state.note(line, fld, raw.strip())
        return
    _keep_path(state, fld, line, raw)
    if not state.yaml_na or fld != "exp_yaml_path":
        state.note(line, fld, notes_under_path(raw, fld))


def _max_time_text(raw: str) -> str:
    """The time limit as written, its first-step clause kept apart so it is not read as a label or the limit."""
    clause = first_step_clause(raw[:2_000])
    if not clause:
        return extract_text(raw, "exp_max_time")
    limit_text = extract_text(without_first_step_clause(raw[:2_000]), "exp_max_time").strip().rstrip(".,;，；。")
    return f"{limit_text}. {clause}" if limit_text else clause


def _read_section(state: _Parse, m: _Marker, end: int) -> None:
    fld = m.field
    if fld in (SWEEP_FIELD, HOST_FIELD):
        _keep_as_written(state, m, end)
        return
    if fld != NOTES and state.values.get(fld):
        state.note(m.line, fld, "\n".join(state.doc.lines[m.line:end]))  # a second copy of a part
        return
    start = m.line + m.skip
    fields = _field_items(state.doc, fld, start, end) if fld != NOTES and m.style != "table" else None
    if fields is not None:
        _read_fields(state, m, fields[0], fields[1], end)
    else:
        _read_text_section(state, m, start, end)


def _keep_as_written(state: _Parse, m: _Marker, end: int) -> None:
    """The sweep and host parts have their own small grammars (sweep.py, ssh_login.py): their text is kept
    as written (the host's inline text too), sections of the same part joined."""
    fld = m.field
    text = dedent("\n".join(state.doc.lines[m.line + m.skip:end])).strip("\n")
    if fld == HOST_FIELD and m.inline:
        text = f"{m.inline}\n{text}"
    state.values[fld] = "\n".join(x for x in (state.values.get(fld, ""), text) if x)


# -------------------------------------------------------------------------------- parse


def _normalize(text: str) -> tuple[str, int]:
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    source_lines = text.count("\n") + 1
    if source_lines > BLUEPRINT_MAX_LINES:
        text = "\n".join(text.split("\n", BLUEPRINT_MAX_LINES)[:BLUEPRINT_MAX_LINES])
    return text, source_lines


def parse_blueprint(text: str, *, deadline: float | None = None) -> Blueprint:
    """Every part found in `text`; missing parts stay empty. Never raises on any string, except
    `ParseDeadline` when `deadline` (`parse_deadline.after`: this thread's CPU clock) passes first."""
    if not isinstance(text, str):
        return Blueprint()
    text, source_lines = _normalize(text)
    doc = parse_doc(unwrap(text, _has_tags))
    state = _Parse(doc=doc, deadline=deadline)
    if doc.nesting_cut >= 0:
        state.error("blueprint", f"lists or quotes nest too deep at line {doc.nesting_cut + 1}: the text from "
                    "there on is not read; flatten the nesting")
    markers = _find_markers(doc, state)
    untagged, commands = _read_sections(doc, state, markers)
    for fld, value in state.examples.items():
        state.values[fld] = state.values.get(fld) or value
    _keep_untagged_notes(state, untagged, markers)
    bp = _assemble(state, source_lines, declared_swarm=any(m.field == "exp_swarm_server" for m in markers))
    _resolve_swarm(state, bp)
    state.problems.extend(resolve_host(bp, state.values.get(HOST_FIELD, ""), "\n".join(
        "" if k in commands else line for k, line in enumerate(doc.lines))))
    bp.parse_problems = state.problems
    return bp


def _keep_untagged_notes(state: _Parse, untagged: list[tuple[int, str]], markers: list[_Marker]) -> None:
    """Text outside every part becomes notes (a title of headings only, above the first part, does not),
    all notes then in document order."""
    for start, chunk in untagged:
        chunk = dedent(chunk).strip("\n")
        if chunk.strip() and not (start == 0 and markers and _only_headings(chunk)):
            state.notes.append((start, chunk))
    state.notes.sort(key=lambda item: item[0])


def _assemble(state: _Parse, source_lines: int, *, declared_swarm: bool) -> Blueprint:
    """The blueprint from the values read (before swarm mode and the host are resolved)."""
    max_time = state.max_time_text
    return Blueprint(
        exp_purpose=state.values.get("exp_purpose", ""),
        exp_codebase_dir=state.values.get("exp_codebase_dir", ""),
        exp_venv_exe=state.values.get("exp_venv_exe", ""),
        exp_yaml_path=state.values.get("exp_yaml_path", ""),
        exp_launch_command=state.values.get("exp_launch_command", ""),
        exp_result_dir=state.values.get("exp_result_dir", ""),
        exp_max_time_seconds=(parse_duration(without_first_step_clause(max_time))
                              if 0 < len(max_time) <= DURATION_MAX_CHARS else None),
        exp_max_time_text=max_time,
        notes="\n\n".join(text for _, text in state.notes if text.strip()),
        exp_swarm_server=state.values.get("exp_swarm_server", ""),
        exp_val_result_path=state.values.get("exp_val_result_path", ""),
        exp_swarm_declared=declared_swarm,
        exp_swarm_form="part" if declared_swarm else "",
        exp_yaml_na=state.yaml_na,
        exp_sweep=state.values.get(SWEEP_FIELD, ""),
        source_lines=source_lines,
    )


def _read_sections(doc: Doc, state: _Parse, markers: list[_Marker]) -> tuple[list[tuple[int, str]], set[int]]:
    """Read each marker's section into `state`; the text between sections (start line, text) and the
    command parts' lines (an ssh there is the command's: blueprint_host.py)."""
    lines = doc.lines
    cursor = 0
    untagged: list[tuple[int, str]] = []
    commands: set[int] = set()
    for k, m in enumerate(markers):
        if k % 64 == 0:
            state.tick()
        if m.line > cursor:
            untagged.append((cursor, "\n".join(lines[cursor: m.line])))
        stop = markers[k + 1].line if k + 1 < len(markers) else len(lines)
        end = _section_end(doc, m, stop, last=k + 1 == len(markers))
        if m.field in _COMMAND_FIELDS:
            commands.update(range(m.line, end))
        _read_section(state, m, end)
        cursor = max(end, m.line + m.skip)
    if cursor < len(lines):
        untagged.append((cursor, "\n".join(lines[cursor:])))
    return untagged, commands


def _resolve_swarm(state: _Parse, bp: Blueprint) -> None:
    """Swarm mode as the skills write it: `- server:`/`- client:` bullets, or a launch command that starts
    the server (in tmux or in the background) and then the client; refused when it cannot be split."""
    fld = "exp_launch_command"
    if bp.exp_swarm_declared or any(p.field == fld and p.level == Level.error for p in state.problems):
        return
    if state.swarm_bullets is not None:
        bp.exp_swarm_server, bp.exp_launch_command = state.swarm_bullets
        bp.exp_swarm_declared, bp.exp_swarm_form = True, "bullets"
        return
    split, refusal = split_swarm_command(bp.exp_launch_command)
    if split is not None:
        bp.exp_swarm_server, bp.exp_launch_command = split.server, split.client
        bp.exp_swarm_declared, bp.exp_swarm_form = True, split.form
        bp.exp_swarm_client_delay_seconds = split.delay_seconds
        state.warning(fld, _split_warning(split))
    elif refusal:
        state.error(fld, refusal)
    elif bp.exp_yaml_na and bp.exp_launch_command.strip():
        state.error(fld, no_server_refusal(bp.exp_launch_command))


def _split_warning(split: SwarmSplit) -> str:
    """What the runner made of a launch command that starts the swarm server and then the client."""
    how = ("its own tmux session" if split.form == "tmux" else "the background")
    waited = (f"; the `sleep {split.delay_seconds:g}` before the client is dropped: the runner starts the "
              "client once the server prints `Starting swarm server on port N`" if split.delay_seconds else "")
    return (f"swarm mode: the swarm server, started in {how} by the launch command, runs as "
            f"[exp_swarm_server] (the runner starts or reuses it, waits for it and watches it){waited}; "
            "the rest runs as the client")


def _only_headings(chunk: str) -> bool:
    """A title (ATX or setext), rules and a table header: nothing worth keeping as a note."""
    lines = chunk.split("\n")
    return all(
        not ln.strip() or ln.lstrip().startswith(("#", "|")) or _SETEXT_LINE.fullmatch(ln)
        or _RULE_LINE.fullmatch(ln)
        or (k + 1 < len(lines) and _SETEXT_LINE.fullmatch(lines[k + 1]))
        for k, ln in enumerate(lines)
    )


def load_blueprint(path: str | Path, *, check_disk: bool = True) -> tuple[Blueprint, list[Problem]]:
    """Read, parse and validate a blueprint file; an unreadable file is a problem, not an exception."""
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        return Blueprint(), [Problem(level=Level.error, field="blueprint",
                                     message=f"cannot read the blueprint {path}: {reason}")]
    bp = parse_blueprint(text)
    return bp, validate_blueprint(bp, check_disk=check_disk)


