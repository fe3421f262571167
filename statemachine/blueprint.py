"""Read an experiment blueprint (markdown, English or Chinese) into a `Blueprint`.

Blueprints are written by people and by LLM agents in many layouts, so the parser works
in two steps rather than one format-specific pattern:

1. find *markers*: lines that open a part — a heading, a list item, a bold or plain line
   or a table row that starts with a tag (`[exp_codebase_dir]`, `**exp_venv_exe**`, ...),
   or, for parts written without any tag, with a known label ("实验目的", "Launch command");
   each marker's section runs to the next marker or the structural end of its block;
2. pull each field's value out of its section with a small per-field cleaner (a path, a
   YAML path, a shell command joined into one line, a duration, free text).

Text in no part (and the optional notes part) is kept verbatim as `notes`.
"""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ajet_runner.statemachine.command import LAUNCH_COMMAND_MAX_CHARS
from ajet_runner.statemachine.durations import DURATION_MAX_CHARS, format_limit, parse_duration
from ajet_runner.statemachine.first_step import first_step_clause, without_first_step_clause
from ajet_runner.statemachine.models import BLUEPRINT_FIELDS, Blueprint, Level, Problem
from ajet_runner.statemachine.swarm_blueprint import swarm_problems, swarm_spec

__all__ = ["parse_blueprint", "validate_blueprint", "load_blueprint"]

NOTES = "notes"

# Tag spellings (lowercase, `-`/space folded to `_`). Long names count with or without
# brackets; the short ones only inside brackets, where they cannot be ordinary words.
_TAGS: dict[str, tuple[str, ...]] = {
    "exp_purpose": ("exp_purpose", "exp_goal", "exp_objective"),
    "exp_codebase_dir": ("exp_codebase_dir", "exp_codebase", "exp_code_dir", "exp_codebase_path"),
    "exp_venv_exe": ("exp_venv_exe", "exp_venv", "exp_python", "exp_python_exe", "exp_venv_python"),
    "exp_yaml_path": ("exp_yaml_path", "exp_yaml", "exp_config_path", "exp_conf", "exp_config"),
    "exp_launch_command": ("exp_launch_command", "exp_launch_cmd", "exp_command", "exp_launch",
                           "exp_run_command", "exp_cmd"),
    "exp_result_dir": ("exp_result_dir", "exp_results_dir", "exp_result_path", "exp_output_dir",
                       "exp_result"),
    "exp_max_time": ("exp_max_time", "exp_maxtime", "exp_time_limit", "exp_max_runtime"),
    "exp_swarm_server": ("exp_swarm_server", "exp_swarm_server_command", "exp_swarm_server_cmd",
                         "exp_swarm_command", "exp_swarm"),
    "exp_val_result_path": ("exp_val_result_path", "exp_val_result", "exp_val_results_path",
                            "exp_result_file", "exp_results_file"),
    NOTES: ("exp_notes", "exp_note", "exp_other", "exp_others", "exp_other_notes", "exp_extra",
            "exp_additional_notes", "exp_additional_info", "exp_misc"),
}
_BRACKET_ONLY: dict[str, tuple[str, ...]] = {
    "exp_purpose": ("purpose",),
    "exp_codebase_dir": ("codebase_dir", "codebase"),
    "exp_venv_exe": ("venv_exe", "venv", "python"),
    "exp_yaml_path": ("yaml_path", "yaml"),
    "exp_launch_command": ("launch_command", "command"),
    "exp_result_dir": ("result_dir", "results_dir"),
    "exp_max_time": ("max_time", "maxtime"),
    "exp_swarm_server": ("swarm_server", "swarm"),
    "exp_val_result_path": ("val_result_path", "result_file"),
    NOTES: ("notes", "note", "other", "others", "other_notes", "additional_notes", "misc", "其他", "备注"),
}
_TAG_OF = {alias: f for f, aliases in _TAGS.items() for alias in aliases}
_BRACKET_TAG_OF = {**_TAG_OF, **{a: f for f, aliases in _BRACKET_ONLY.items() for a in aliases}}

# Labels that open a part written without tags (docs/background.md#manual-workflow). Checked
# only on headings, numbered items and bold lines, and only for parts that have no tag.
_LABELS: dict[str, tuple[str, ...]] = {
    "exp_purpose": ("实验目的", "experiment purpose", "purpose of the experiment", "purpose"),
    "exp_codebase_dir": ("主实验代码路径", "实验代码路径", "代码路径", "main experiment code path",
                         "experiment code path", "codebase directory", "codebase dir", "codebase",
                         "code path"),
    "exp_venv_exe": ("python虚拟环境路径", "python 虚拟环境路径", "虚拟环境路径", "python虚拟环境",
                     "python virtual environment path", "python virtual environment",
                     "python executable", "python interpreter", "venv python", "virtualenv"),
    "exp_yaml_path": ("实验配置文件路径", "实验配置文件", "配置文件路径", "experiment config file path",
                      "experiment configuration file path", "config file path", "yaml path",
                      "config yaml", "yaml config", "configuration file"),
    "exp_launch_command": ("执行训练的命令", "训练命令", "启动命令", "执行命令", "运行命令",
                           "training execution command", "training command", "launch command",
                           "run command", "command to run"),
    "exp_result_dir": ("结果数据存储路径", "结果存储路径", "结果目录", "结果路径", "输出目录",
                       "result data storage path", "result directory", "results directory",
                       "result dir", "output directory"),
    "exp_max_time": ("最大运行时间", "最长运行时间", "运行时间", "时间限制", "运行时长",
                     "maximum runtime", "max runtime", "maximum run time", "max time",
                     "time limit", "time budget"),
    "exp_swarm_server": ("swarm服务器启动命令", "swarm 服务器启动命令", "swarm服务器", "swarm 服务器",
                         "swarm server command", "swarm server start command", "swarm server"),
    "exp_val_result_path": ("验证结果文件路径", "验证结果文件", "结果文件路径", "validation result path",
                            "validation results file", "val result path", "results file"),
    NOTES: ("其他实验相关信息", "其他信息", "其它信息", "其他说明", "其他注意事项", "附加说明", "补充说明",
            "备注", "其他", "其它", "other notes", "additional notes", "additional information",
            "other information", "notes", "remarks"),
}

_HEADING = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+|$)(.*)$")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_LIST = re.compile(r"^([ \t]*)(\d{1,3}(?:[.)][ \t]+|[、．][ \t]*)|[-*+•][ \t]+)(.*)$")
_NUMBER_PREFIX = re.compile(r"^\(?\d{1,3}[.)、．:：]?\)?\s+")
_FENCE_OPEN = re.compile(r"^[ \t]*(`{3,}|~{3,})(.*)$")
_LEAD_MARKUP = " \t*_`>#"
_OPEN_BRACKETS = "[［【"
_CLOSE_BRACKETS = "]］】"
_WRAPPER = re.compile(r"^([ \t]*)(`{3,}|~{3,})[ \t]*(markdown|md)[ \t]*$", re.IGNORECASE)
_LATE_TAG = re.compile(r"[\[［【]\s*`?exp_\w+`?\s*[\]］】]", re.IGNORECASE)
_IDENT = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")
_SEPARATOR = re.compile(r"^[\s*_`]*(?:[:：=]+|[\-—–]+(?=\s))?[\s*_`]*")
_BARE_TAG_FOLLOW = re.compile(r"^[\s*_`]*(?:$|[:：=\-—–(（])")
_HINT_LINE = re.compile(r"e\.g\.|\be\.g\b|for example|例如|比如|such as|举例|默认|default:", re.IGNORECASE)
# Words that make a leading "label:" (or a label-only first line) a description of the field.
_PATH_WORDS = r"path|路径|dir|folder|目录|"
_LABEL_KEYWORDS: dict[str, re.Pattern[str]] = {
    fld: re.compile(words, re.IGNORECASE)
    for fld, words in {
        "exp_purpose": r"purpose|目的|goal|objective|aim",
        "exp_codebase_dir": _PATH_WORDS + r"code|代码|root|repo",
        "exp_venv_exe": _PATH_WORDS + r"python|venv|virtual|环境|interpreter|解释器|exe",
        "exp_yaml_path": _PATH_WORDS + r"yaml|config|配置|file|文件",
        "exp_launch_command": r"command|cmd|命令|指令|launch|启动|run|运行",
        "exp_result_dir": _PATH_WORDS + r"result|结果|output|输出|存储",
        "exp_max_time": r"time|时间|时长|duration|limit|限制",
        "exp_swarm_server": r"command|cmd|命令|指令|launch|启动|run|运行|server|服务器|swarm",
        "exp_val_result_path": _PATH_WORDS + r"result|结果|file|文件|val|验证",
        NOTES: r"notes|说明|备注|信息|info|other|其他|其它|additional|附加|补充",
    }.items()
}
_LABEL_ONLY_FORBIDDEN = re.compile(r"[/=`$]|\s-|\.\w|&&")
_LABEL_FORBIDDEN = re.compile(r"`|&&|\s--?\w|=|\||\$")
_LABEL_SEP = re.compile(r"[:：](?!//)(?!\d)")
_PLACEHOLDERS = {"", "n/a", "na", "none", "null", "nil", "tbd", "todo", "-", "--", "无", "暂无", "未知",
                 "(none)", "（无）", "不适用"}
_TOKEN_SPLIT = re.compile(r"[\s，。；、（）()<>「」\"“”'‘’]+")
_PROSE_LINE = re.compile(r"^(?:note|notes|注意|注|说明|备注|remark|ps|tip|提示)\s*[:：]", re.IGNORECASE)
_PYTHON_NAME = re.compile(r"^python[\d.]*$", re.IGNORECASE)
_SPACES_DASHES = re.compile(r"[\s\-]+")
_PAREN_NOTE = re.compile(r"^\s*[(（][^)）\n]{0,60}[)）]")  # "(absolute path)" after a label
_COLON_NEXT = re.compile(r"^[\s*_`]*[:：]")
_RULE_LINE = re.compile(r"\s*([-*_=])\1{2,}\s*")
_BACKTICK_SPAN = re.compile(r"`([^`\n]+)`")
_FENCE_CLOSE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*$")
_FENCE_STARTS = ("```", "~~~")
# A line with none of these holds no token that `_path_score` rates above 0 (a `/`, `~` or `$`,
# a YAML suffix, a python name): its tokens need not be cut and scored one by one.
_MAY_SCORE = re.compile(r"[/~$]|ya?ml|python", re.IGNORECASE)
# Only the first lines of a blueprint are read (a longer one is refused): parsing costs ~1-2 us a
# line, and no input may take over 100 ms. Real blueprints have tens to hundreds of lines.
BLUEPRINT_MAX_LINES = 10_000
# A path part's value is looked for in its first lines; a part longer than that is prose.
PATH_PART_LINES = 200
# Sections of one path part read for its value before the rest count as notes: nobody writes a part
# twenty times, and 2,000 repeats of "[exp_yaml_path] <no path>" took 120 ms, each read for a path.
PATH_PART_SECTIONS = 16
_UNWRAP_DEPTH = 3  # ```markdown fences inside ```markdown fences: nobody writes more; each level re-reads all
_INDENTED = re.compile(r"^[ \t]", re.MULTILINE)
_WHITESPACE_ONLY = re.compile(r"^[ \t]+$", re.MULTILINE)
_LEADING_WHITESPACE = re.compile(r"(^[ \t]*)(?:[^ \t\n])", re.MULTILINE)


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


@dataclass
class _Section:
    marker: _Marker
    lines: list[str] = field(default_factory=list)

    def text(self) -> str:
        """The inline rest of the marker line plus the following lines, dedented."""
        body = _dedent("\n".join(self.lines))
        return f"{self.marker.inline}\n{body}".strip("\n") if self.marker.inline else body.strip("\n")


# ---------------------------------------------------------------------------- structure


def _dedent(text: str) -> str:
    """`textwrap.dedent` (same result) without its per-line Python loop: 50,000 lines in a few ms."""
    if _INDENTED.search(text) is None:
        return text
    text = _WHITESPACE_ONLY.sub("", text)
    margin = os.path.commonprefix(_LEADING_WHITESPACE.findall(text))
    return re.sub(r"(?m)^" + margin, "", text) if margin else text


def _fence_blocks(lines: list[str]) -> list[tuple[int, int]]:
    """(opening, closing) line indexes of closed fenced blocks; an unclosed fence is text.

    Linear: only fence-like lines are looked at, and an opener is known to have no closer
    below it (from the largest closer run further down) without scanning for one.
    """
    opens: list[tuple[int, str, int]] = []  # (line, fence char, run length)
    closers: dict[str, list[tuple[int, int]]] = {"`": [], "~": []}  # char -> [(line, run length)]
    for i, line in enumerate(lines):
        if line.lstrip(" \t")[:3] not in _FENCE_STARTS or (m := _FENCE_OPEN.match(line)) is None:
            continue
        opens.append((i, m.group(1)[0], len(m.group(1))))
        if (c := _FENCE_CLOSE.match(line)) is not None:
            closers[c.group(1)[0]].append((i, len(c.group(1))))
    if not opens:
        return []
    lines_of = {ch: [j for j, _ in found] for ch, found in closers.items()}
    largest_below: dict[str, list[int]] = {}  # char -> largest closer run at or after each closer
    for ch, found in closers.items():
        runs = [0] * (len(found) + 1)
        for k in range(len(found) - 1, -1, -1):
            runs[k] = max(runs[k + 1], found[k][1])
        largest_below[ch] = runs
    blocks: list[tuple[int, int]] = []
    after = 0  # the first line not inside a found block
    for i, char, size in opens:
        if i < after:
            continue
        k = bisect.bisect_right(lines_of[char], i)
        if largest_below[char][k] < size:
            continue  # no closer this long below: an unclosed fence is text
        while closers[char][k][1] < size:
            k += 1
        end = closers[char][k][0]
        blocks.append((i, end))
        after = end + 1
    return blocks


def _fence_lines(lines: list[str]) -> set[int]:
    """Indexes of lines inside or delimiting a closed fenced block."""
    return {k for start, end in _fence_blocks(lines) for k in range(start, end + 1)}


def _head(rest: str) -> str:
    """`rest` without leading markup and a number prefix ("**1. ", "## (2) "): where a tag or label starts."""
    s = rest.lstrip(_LEAD_MARKUP)
    if s[:1] == "(" or s[:1].isdigit():
        s = _NUMBER_PREFIX.sub("", s, count=1).lstrip(_LEAD_MARKUP)
    return s


def _match_tag(rest: str, *, strict: bool = False) -> tuple[str, str] | None:
    """(field, text after the tag) when `rest` starts with a tag, bracketed or not.

    `strict` (plain lines): a bare tag must be followed by a separator, so that
    "exp_result_dir will hold the report" stays prose.
    """
    return _tag_at(_head(rest), strict=strict)


def _tag_at(s: str, *, strict: bool = False) -> tuple[str, str] | None:
    """`_match_tag` on a line's `_head`; most lines are rejected on their first characters."""
    if not s:
        return None
    if s[0] in _OPEN_BRACKETS:
        window = s[:61]  # the closing bracket must come within 60 characters
        close = min((k for c in _CLOSE_BRACKETS if (k := window.find(c, 1)) > 0), default=-1)
        if close < 0:
            return None
        name = s[1:close].strip(" \t*_`")
        found = _BRACKET_TAG_OF.get(_SPACES_DASHES.sub("_", name.lower()))
        after = s[close + 1 :]
    else:
        if s[:3].lower() != "exp":  # every unbracketed tag starts with exp_
            return None
        m = _IDENT.match(s)
        if m is None:
            return None
        found = _TAG_OF.get(_SPACES_DASHES.sub("_", m.group(0).lower()))
        after = s[m.end() :]
        if strict and not _BARE_TAG_FOLLOW.match(after):
            return None
        if after[:1].isascii() and after[:1].isalnum():
            return None
    if found is None:
        return None
    return found, _SEPARATOR.sub("", after, count=1).strip()


_LABELS_LONGEST_FIRST = sorted(((label, fld) for fld, labels in _LABELS.items() for label in labels),
                               key=lambda item: -len(item[0]))
_LONGEST_LABEL = len(_LABELS_LONGEST_FIRST[0][0])
_LABELS_BY_FIRST_CHAR: dict[str, list[tuple[str, str]]] = {}
for _label, _fld in _LABELS_LONGEST_FIRST:
    _LABELS_BY_FIRST_CHAR.setdefault(_label[:1], []).append((_label, _fld))


def _match_label(rest: str, *, colon: bool = False) -> tuple[str, str] | None:
    """(field, text after the label) when `rest` starts with a known part label.

    `colon` (plain lines): only "Label: value" counts, so prose that happens to start
    with a label word is left alone.
    """
    return _label_at(_head(rest), colon=colon)


def _label_at(s: str, *, colon: bool = False) -> tuple[str, str] | None:
    """`_match_label` on a line's `_head`."""
    if colon and ":" not in s and "：" not in s:
        return None
    low = s[:_LONGEST_LABEL + 1].lower()
    best: tuple[int, str] | None = None
    for label, fld in _LABELS_BY_FIRST_CHAR.get(low[:1], ()):  # the first that fits is the longest
        if low.startswith(label):
            nxt = low[len(label) : len(label) + 1]
            if not (nxt.isascii() and nxt.isalnum()):  # "purposes", "codebase2" are not labels
                best = (len(label), fld)
                break
    if best is None:
        return None
    after = s[best[0] :]
    after = _PAREN_NOTE.sub("", after, count=1)  # "(absolute path)"
    if colon and not _COLON_NEXT.match(after):
        return None
    return best[1], _SEPARATOR.sub("", after, count=1).strip()


def _heading(line: str) -> re.Match[str] | None:
    return _HEADING.match(line) if "#" in line[:4] else None


def _list_item(line: str) -> re.Match[str] | None:
    first = line.lstrip(" \t")[:1]
    return _LIST.match(line) if first and (first in "-*+•" or first.isdigit()) else None


def _setext(line: str) -> re.Match[str] | None:
    return _SETEXT.match(line) if line.lstrip(" ")[:1] in ("=", "-") else None


def _find_markers(lines: list[str], fenced: set[int], *, first_tag: bool = False) -> list[_Marker]:
    """Each line is first rejected on cheap checks (a few characters), so that 50,000 short
    lines cost tens of milliseconds, not hundreds. `first_tag`: only the first tagged part
    other than notes (or none), found without reading further."""
    markers: list[_Marker] = []
    last = len(lines) - 1
    for i, line in enumerate(lines):
        if i in fenced or not line.strip():
            continue
        style, level, indent, numbered, skip = "plain", 0, 0, False, 1
        rest = line.strip()
        setext = _setext(lines[i + 1]) if i < last and i + 1 not in fenced else None
        li = _list_item(line)
        if (h := _heading(line)) is not None:
            style, level, rest = "heading", len(h.group(1)), h.group(2).strip().rstrip("#").strip()
        elif setext is not None and li is None and not rest.startswith("|") and not _setext(line):
            style, level, skip = "heading", 1 if setext.group(1)[0] == "=" else 2, 2  # "Purpose\n-------"
        elif li is not None:
            style, indent, rest = "list", len(li.group(1).expandtabs(4)), li.group(3)
            numbered = li.group(2)[0].isdigit()
        elif rest.startswith("|"):
            cells = [c.strip() for c in rest.strip("|").split("|")]
            hit = _match_tag(cells[0]) if cells else None
            if hit is not None:
                value = " | ".join(c for c in cells[1:] if c) or hit[1]
                markers.append(_Marker(i, hit[0], "table", inline=value))
            continue
        structural = style == "heading" or numbered or rest.startswith(("**", "__"))
        head = _head(rest)
        hit = _tag_at(head, strict=style == "plain" and rest[:1] not in "*_`")
        if hit is None and structural and (late := _LATE_TAG.search(rest)) is not None:
            hit = _match_tag(rest[late.start() :])  # "## 1. 实验目的 [exp_purpose]"
        by_tag = hit is not None
        if hit is None:
            hit = _label_at(head, colon=not structural)
        if hit is not None:
            markers.append(_Marker(i, hit[0], style, level, indent, numbered, hit[1], by_tag, skip))
            if first_tag and by_tag and hit[0] != NOTES:
                return markers[-1:]
    if first_tag:
        return [m for m in markers if m.by_tag and m.field != NOTES]
    tagged = {m.field for m in markers if m.by_tag}
    return [m for m in markers if m.by_tag or m.field not in tagged]


def _section_end(lines: list[str], fenced: set[int], m: _Marker, stop: int, last: bool) -> int:
    """Index where marker `m`'s section ends (exclusive), at most `stop`."""
    if m.style == "table":
        return m.line + 1
    has_content = bool(m.inline)
    blank_seen = False
    for j in range(m.line + m.skip, stop):
        line = lines[j]
        if j in fenced:
            has_content, blank_seen = True, False
            continue
        if not line.strip():
            blank_seen = True
            continue
        h = _heading(line)
        if h is not None and (m.style != "heading" or len(h.group(1)) <= m.level):
            return j
        if (
            m.style == "list"
            and (li := _list_item(line)) is not None
            and len(li.group(1).expandtabs(4)) <= m.indent
            and li.group(2)[0].isdigit() == m.numbered
        ):
            return j
        if (last and m.style != "heading" and blank_seen and has_content
                and len(line) - len(line.lstrip()) <= m.indent):
            return j  # text after the last inline part, past a blank line, is not part of it
        has_content, blank_seen = True, False
    return stop


def _unwrap(text: str, depth: int = 0) -> str:
    """The blueprint inside a ```markdown fence when the tags are only inside it; dedented.

    At most `_UNWRAP_DEPTH` fences deep: each level reads the whole text again, and 400
    nested fences took 1.5 s.
    """
    low = text.lower()
    if depth >= _UNWRAP_DEPTH or ("markdown" not in low and "md" not in low):
        return _dedent(text)
    lines = text.split("\n")
    wrappers: list[tuple[int, re.Match[str]]] = []
    for i, line in enumerate(lines):
        if line.lstrip(" \t")[:3] in _FENCE_STARTS and (m := _WRAPPER.match(line)) is not None:
            wrappers.append((i, m))
            if len(wrappers) == 3:
                break
    for i, m in wrappers:
        indent, char, size = len(m.group(1)), m.group(2)[0], len(m.group(2))
        closer = re.compile(rf"^[ \t]{{0,{indent}}}{re.escape(char)}{{{size},}}[ \t]*$")
        end = next((j for j in range(len(lines) - 1, i, -1)
                    if lines[j].lstrip(" \t")[:3] in _FENCE_STARTS and closer.match(lines[j])), len(lines))
        inner = _dedent("\n".join(lines[i + 1 : end])).split("\n")
        if _has_tags(inner) and not _has_tags(lines[:i] + lines[end + 1 :]):
            return _unwrap("\n".join(inner), depth + 1)
    return _dedent(text)


def _has_tags(lines: list[str]) -> bool:
    """Whether any part other than notes is opened by a tag (stops at the first)."""
    return bool(_find_markers(lines, _fence_lines(lines), first_tag=True))


# ------------------------------------------------------------------------------ cleaners


def _strip_label(text: str, fld: str) -> str:
    """Drop a leading description of the field: "主实验代码路径（绝对路径）： /x" -> "/x"."""
    keywords = _LABEL_KEYWORDS[fld]
    lines = text.split("\n")
    idx = next((k for k, ln in enumerate(lines) if ln.strip()), None)
    if idx is None:
        return ""
    first = lines[idx]
    for sep in _LABEL_SEP.finditer(first):
        prefix = first[: sep.start()]
        if len(prefix) > 120:
            break
        if keywords.search(prefix) and not _LABEL_FORBIDDEN.search(prefix):
            lines[idx] = first[sep.end() :].strip()
            break
    first = lines[idx].strip()
    label_only = len(first) <= 80 and keywords.search(first) and not _LABEL_ONLY_FORBIDDEN.search(first)
    if any(ln.strip() for ln in lines[idx + 1 :]) and (not first or label_only):
        lines[idx] = ""
    return "\n".join(lines).strip("\n")


def _clean_token(tok: str) -> str:
    tok = tok.strip().strip("`").strip()
    tok = re.sub(r"^\*+|\*+$", "", tok)
    return tok.rstrip(".,;:!?。，；：]】》").lstrip("[【《")


def _is_placeholder(value: str) -> bool:
    return value.strip().strip("`*_ ").lower() in _PLACEHOLDERS


def _path_score(tok: str, fld: str) -> int:
    """How much `tok` looks like this field's value (0 = not at all)."""
    if not tok or "://" in tok or _is_placeholder(tok) or not re.search(r"\w", tok):
        return 0
    pathish = tok.startswith(("/", "~", "$", "./", "../")) or "/" in tok
    if fld == "exp_yaml_path":
        return 3 if re.search(r"\.ya?ml$", tok, re.IGNORECASE) else (1 if pathish else 0)
    if fld == "exp_venv_exe":
        if _PYTHON_NAME.match(os.path.basename(tok)):
            return 3
        return 1 if pathish else 0
    return 2 if pathish else 0


_PROSE_AFTER_PATH = re.compile(r"\s+[(（#]|\s+[-—–]+\s|[,，;；]\s")


def _whole_path(line: str) -> str:
    """An absolute path written bare, kept whole through spaces and `#(`: `/mnt/my data/code`.

    Only when what follows the first space is itself a path piece (holds a `/`) or the path
    holds `(`; prose after a path (`/x (the repo)`, `/x, see below`) still ends it.
    """
    stripped = line.strip().strip("`*").strip()
    if "`" in stripped or not stripped.startswith(("/", "~")):
        return ""
    cut = _PROSE_AFTER_PATH.split(stripped, maxsplit=1)[0].strip()
    parts = cut.split()
    if (len(parts) > 1 and all("/" in part for part in parts[1:])) or "(" in cut:
        return _clean_token(cut)
    return ""


def _line_candidates(line: str) -> list[str]:
    whole = _whole_path(line)
    if whole:
        return [whole]
    spans = [s.strip() for s in _BACKTICK_SPAN.findall(line)]
    tokens = [_clean_token(t) for t in _TOKEN_SPLIT.split(_BACKTICK_SPAN.sub(" ", line))]
    return [s for s in spans if s] + [t for t in tokens if t]


def _extract_path(text: str, fld: str) -> tuple[str, bool]:
    """(the first path-like token, whether it is only an example), preferring typical names."""
    text = _strip_label(text, fld)
    lines = [ln for ln in text.split("\n")[:PATH_PART_LINES] if ln.strip() and not _FENCE_OPEN.match(ln)]
    hint_lines = [ln for ln in lines if _HINT_LINE.search(ln)]
    hints = set(hint_lines)  # `ln in` a list of them made this quadratic
    ordered = [ln for ln in lines if ln not in hints] + hint_lines
    best, best_score, best_line = "", 0, ""
    for ln in ordered:
        if _MAY_SCORE.search(ln) is None:
            continue
        for cand in _line_candidates(ln):
            score = _path_score(cand, fld)
            if score > best_score:
                best, best_score, best_line = cand, score, ln
        if best_score >= 2:
            break
    if best:
        return _expand(best), best_line in hints
    for ln in lines:  # a bare relative value such as "codebase" or "python3"
        cands = _line_candidates(ln)
        if len(cands) == 1 and not _is_placeholder(cands[0]):
            return _expand(cands[0]), False
        break
    return "", False


def _notes_under_path(text: str, fld: str) -> str:
    """Prose written under a path part besides its value (a line without any path-like token,
    e.g. "Note: this YAML needs 4 GPUs"): kept in the blueprint's notes, not dropped.
    Lines past the first `PATH_PART_LINES` are not read for a path: all kept as notes."""
    lines = _strip_label(text, fld).split("\n")
    kept: list[str] = []
    for ln in lines[:PATH_PART_LINES]:
        body = ln.strip()
        if not body or _FENCE_OPEN.match(ln) or _HINT_LINE.search(ln):
            continue
        if (_MAY_SCORE.search(ln) is not None and any(_path_score(c, fld) for c in _line_candidates(ln))
                and not _PROSE_LINE.match(body)):
            continue
        if (len(body) <= 80 and _LABEL_KEYWORDS[fld].search(body) and body.endswith((":", "："))
                and not _PROSE_LINE.match(body)):
            continue  # a label on its own line
        kept.append(body)
    kept.extend(body for ln in lines[PATH_PART_LINES:] if (body := ln.strip()))
    return "\n".join(kept)


def _expand(path: str) -> str:
    """`~` and environment variables that are set; unset ones stay visible."""
    return os.path.expanduser(os.path.expandvars(path))


def _continues(line: str) -> bool:
    """A line that a shell reads on into the next one: `\\` outside quotes, or a trailing `&&`/`||`/`|`."""
    s = line.rstrip()
    balanced = s.count("'") % 2 == 0 and s.count('"') % 2 == 0
    return balanced and (s.endswith("\\") or s.endswith(("&&", "||", "|")))


def _join_shell_lines(lines: list[str]) -> str:
    """The command as written: one command (with `\\` continuations) as one line, anything more
    (several commands, a heredoc, `if`/`fi`) verbatim, line by line, to run as a script body.

    Never chains lines with `&&`: that turned heredoc bodies into commands and broke `if`/`fi`.
    """
    block = _dedent("\n".join(ln.rstrip() for ln in lines)).split("\n")
    while block and not block[0].strip():
        block.pop(0)
    while block and not block[-1].strip():
        block.pop()
    if not block:
        return ""
    if "<<" not in "\n".join(block):  # `$ cmd` is a copied shell prompt (never a command), outside heredocs
        block = [ln.lstrip()[2:] if ln.lstrip().startswith("$ ") else ln for ln in block]
    code = [ln for ln in block if ln.strip() and not ln.lstrip().startswith("#")]
    if code and "<<" not in "\n".join(code) and all(_continues(ln) for ln in code[:-1]):
        pieces: list[str] = []  # joined at the end: adding to one string made 25,000 lines quadratic
        for part in (ln.strip() for ln in code):
            if pieces and pieces[-1].endswith("\\"):
                pieces[-1] = pieces[-1][:-1]
                while pieces and not pieces[-1].rstrip():
                    pieces.pop()
                if pieces:
                    pieces[-1] = pieces[-1].rstrip()
                pieces += [" ", part]
            else:
                pieces += [" ", part] if pieces else [part]
        return "".join(pieces).rstrip("\\").rstrip()
    return "\n".join(block)


def _extract_command(text: str, fld: str = "exp_launch_command") -> str:
    """The launch command: the first fenced block, else a backticked span, else a paragraph."""
    lines = text.split("\n")
    blocks = [cmd for start, end in _fence_blocks(lines) if (cmd := _join_shell_lines(lines[start + 1 : end]))]
    if blocks:  # a preparation block may come first: prefer the one that starts training
        return next((cmd for cmd in blocks if "launcher" in cmd), blocks[0])
    para: list[str] = []
    for ln in _unquote(_strip_label(text, fld)).split("\n"):
        s = ln.strip()
        continued = bool(para) and para[-1].endswith("\\")
        if not s or _FENCE_OPEN.match(ln):
            if para and not continued:
                break
            continue
        if para and not continued and _PROSE_LINE.match(s):
            break
        spans = _BACKTICK_SPAN.findall(s)
        if spans and not (s.startswith("`") and s.endswith("`")):
            span = max(spans, key=len)
            if " " in span:
                para.append(span)
                break
        para.append(s.strip("`").strip())
    cmd = _join_shell_lines(para)
    return "" if _is_placeholder(cmd) else cmd


def _unquote(value: str) -> str:
    """A value written YAML-style: `"..."`, `'...'`, or a `|` / `>` block."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" and value[0] not in value[1:-1]:
        return value[1:-1]
    return re.sub(r"^[|>][-+]?[ \t]*\n", "", value)


def _extract_text(text: str, fld: str) -> str:
    return _unquote(_strip_label(text, fld))


# -------------------------------------------------------------------------------- parse


def parse_blueprint(text: str) -> Blueprint:
    """Every part found in `text`; missing parts stay empty. Never raises on any string."""
    if not isinstance(text, str):
        return Blueprint()
    text = text.replace("\r\n", "\n").replace("\r", "\n").lstrip("\ufeff")
    source_lines = text.count("\n") + 1
    if source_lines > BLUEPRINT_MAX_LINES:
        text = "\n".join(text.split("\n", BLUEPRINT_MAX_LINES)[:BLUEPRINT_MAX_LINES])
    lines = _unwrap(text).split("\n")
    fenced = _fence_lines(lines)
    markers = _find_markers(lines, fenced)

    sections: list[_Section] = []
    untagged: list[tuple[int, str]] = []  # (first line, text) outside every part
    cursor = 0
    for k, m in enumerate(markers):
        if m.line > cursor:
            untagged.append((cursor, "\n".join(lines[cursor : m.line])))
        stop = markers[k + 1].line if k + 1 < len(markers) else len(lines)
        end = _section_end(lines, fenced, m, stop, last=k + 1 == len(markers))
        sections.append(_Section(m, lines[m.line + m.skip : end]))
        cursor = max(end, m.line + m.skip)
    if cursor < len(lines):
        untagged.append((cursor, "\n".join(lines[cursor:])))

    values: dict[str, str] = {}
    examples: dict[str, str] = {}  # values seen only on "e.g." lines, used when nothing better
    max_time_text = ""
    notes: list[tuple[int, str]] = []
    path_sections: dict[str, int] = {}
    for sec in sections:
        fld = sec.marker.field
        if fld == NOTES:
            notes.append((sec.marker.line, _extract_text(sec.text(), NOTES)))
            continue
        if values.get(fld):
            continue
        raw = sec.text()
        if fld in ("exp_codebase_dir", "exp_venv_exe", "exp_yaml_path", "exp_result_dir", "exp_val_result_path"):
            path_sections[fld] = seen = path_sections.get(fld, 0) + 1
            if seen > PATH_PART_SECTIONS:
                if raw.strip():
                    notes.append((sec.marker.line, f"(under [{fld}]) {raw.strip()}"))
                continue
            value, example_only = _extract_path(raw, fld)
            if example_only:
                examples.setdefault(fld, value)
            else:
                values[fld] = value
            extra = _notes_under_path(raw, fld)
            if extra:
                notes.append((sec.marker.line, f"(under [{fld}]) {extra}"))
        elif fld == "exp_launch_command":
            values[fld] = _extract_command(raw)
        elif fld == "exp_swarm_server":
            values[fld] = _extract_command(raw, fld)
        elif fld == "exp_max_time":  # the first-step clause must not be read as a label or the limit
            clause = first_step_clause(raw)
            if not clause:
                values[fld] = max_time_text = _extract_text(raw, fld)
            else:
                limit_text = _extract_text(without_first_step_clause(raw), fld).strip().rstrip(".,;，；。")
                values[fld] = max_time_text = f"{limit_text}. {clause}" if limit_text else clause
        else:
            values[fld] = _extract_text(raw, fld)
    for fld, value in examples.items():
        values[fld] = values.get(fld) or value

    for start, chunk in untagged:
        chunk = _dedent(chunk).strip("\n")
        if not chunk.strip():
            continue
        if start == 0 and markers and _only_headings(chunk):
            continue  # the document title
        notes.append((start, chunk))
    notes.sort(key=lambda item: item[0])

    return Blueprint(
        exp_purpose=values.get("exp_purpose", ""),
        exp_codebase_dir=values.get("exp_codebase_dir", ""),
        exp_venv_exe=values.get("exp_venv_exe", ""),
        exp_yaml_path=values.get("exp_yaml_path", ""),
        exp_launch_command=values.get("exp_launch_command", ""),
        exp_result_dir=values.get("exp_result_dir", ""),
        exp_max_time_seconds=(parse_duration(without_first_step_clause(max_time_text))
                              if 0 < len(max_time_text) <= DURATION_MAX_CHARS else None),
        exp_max_time_text=max_time_text,
        notes="\n\n".join(text for _, text in notes if text.strip()),
        exp_swarm_server=values.get("exp_swarm_server", ""),
        exp_val_result_path=values.get("exp_val_result_path", ""),
        exp_swarm_declared=any(sec.marker.field == "exp_swarm_server" for sec in sections),
        source_lines=source_lines,
    )


def _only_headings(chunk: str) -> bool:
    """A title (ATX or setext), rules and a table header: nothing worth keeping as a note."""
    lines = chunk.split("\n")
    return all(
        not ln.strip() or _HEADING.match(ln) or ln.lstrip().startswith("|") or _SETEXT.match(ln)
        or _RULE_LINE.fullmatch(ln)
        or (k + 1 < len(lines) and _SETEXT.match(lines[k + 1]))
        for k, ln in enumerate(lines)
    )


# ----------------------------------------------------------------------------- validate


class _Problems(list[Problem]):
    """The problems found so far, with short helpers to add one."""

    def error(self, fld: str, message: str) -> None:
        self.append(Problem(level=Level.error, field=fld, message=message))

    def warning(self, fld: str, message: str) -> None:
        self.append(Problem(level=Level.warning, field=fld, message=message))


_WHAT = {
    "exp_purpose": "a short statement of what the experiment tests",
    "exp_codebase_dir": "the absolute path of the experiment code (the run starts there)",
    "exp_venv_exe": "the absolute path of the python executable of the virtual environment",
    "exp_yaml_path": "the experiment YAML, relative to the codebase or absolute",
    "exp_launch_command": "the command that starts training",
    "exp_result_dir": "the absolute path of the directory for results",
    "exp_max_time": "the maximum run time, e.g. `12 hours`",
}


def _unset_vars(value: str) -> str:
    names = re.findall(r"\$\{?(\w+)\}?", value)
    return f" (it contains the unset variable ${names[0]})" if names else ""


def _check_absolute(bp: Blueprint, fld: str, problems: _Problems) -> bool:
    value = getattr(bp, fld)
    if os.path.isabs(value):
        return True
    problems.error(fld, f"{fld} must be an absolute path, got {value!r}{_unset_vars(value)}")
    return False


def _check_missing(bp: Blueprint, problems: _Problems) -> None:
    for fld in BLUEPRINT_FIELDS:
        if fld == "exp_yaml_path" and (bp.exp_swarm_declared or bp.exp_swarm_server):
            continue  # a swarm client configures its job in Python; the YAML may be "NA"
        if fld == "exp_max_time":
            present = bool(bp.exp_max_time_text.strip()) or bp.exp_max_time_seconds is not None
        else:
            present = bool(getattr(bp, fld).strip())
        if present:
            continue
        message = f"{fld} is missing: the blueprint should give {_WHAT[fld]}"
        if fld == "exp_purpose":
            problems.warning(fld, message)
        else:
            problems.error(fld, message)


def _check_codebase(path: str, problems: _Problems) -> None:
    if not os.path.exists(path):
        problems.error("exp_codebase_dir", f"the codebase {path} does not exist")
    elif not os.path.isdir(path):
        problems.error("exp_codebase_dir", f"the codebase {path} is not a directory")


def _check_venv_exe(exe: str, problems: _Problems) -> None:
    fld = "exp_venv_exe"
    if not os.path.exists(exe):
        problems.error(fld, f"the python executable {exe} does not exist")
    elif os.path.isdir(exe):
        candidates = (os.path.join(exe, "bin", "python"), os.path.join(exe, "python"))
        hint = next((c for c in candidates if os.path.isfile(c)), "")
        problems.error(fld, f"{exe} is a directory, not a python executable"
                       + (f" (did you mean {hint}?)" if hint else ""))
    elif not os.access(exe, os.X_OK):
        sibling = os.path.join(os.path.dirname(exe), "python")
        hint = f" (did you mean {sibling}?)" if os.path.basename(exe) != "python" and os.path.isfile(sibling) else ""
        problems.error(fld, f"the python executable {exe} is not executable{hint}")


def _check_yaml(bp: Blueprint, check_disk: bool, problems: _Problems) -> None:
    import yaml

    from ajet_runner.statemachine.yamlload import load_yaml_file

    fld = "exp_yaml_path"
    path = bp.yaml_abspath()
    codebase = os.path.normpath(bp.exp_codebase_dir) if os.path.isabs(bp.exp_codebase_dir) else ""
    if codebase and os.path.isabs(path) and os.path.commonpath([codebase, path]) != codebase:
        problems.warning(fld, f"the YAML {path} is outside the codebase {codebase}: AgentJet accepts an "
                         "absolute --conf, and resolves the YAML's hydra.searchpath from the codebase (the "
                         "working directory), not from the YAML's folder")
    if not check_disk or not os.path.isabs(path):
        return
    if not os.path.exists(path):
        problems.error(fld, f"the YAML {path} does not exist{_unset_vars(bp.exp_yaml_path)}")
        return
    if not os.path.isfile(path):
        problems.error(fld, f"the YAML {path} is not a file")
        return
    try:
        data = load_yaml_file(path)
    except OSError as exc:
        problems.error(fld, f"cannot read the YAML {path}: {exc.strerror}")
        return
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        problems.error(fld, f"the YAML {path} is not valid YAML: {' '.join(str(exc).split())}")
        return
    if not isinstance(data, dict):
        kind = type(data).__name__
        problems.error(fld, f"the YAML {path} does not hold a mapping of settings (it holds a {kind})")


def _check_result_dir(path: str, problems: _Problems) -> None:
    fld = "exp_result_dir"
    if os.path.exists(path):
        if not os.path.isdir(path):
            problems.error(fld, f"the result dir {path} exists but is not a directory")
        elif not os.access(path, os.W_OK | os.X_OK):
            problems.error(fld, f"the result dir {path} is not writable")
        return
    ancestor = os.path.dirname(os.path.normpath(path))
    while not os.path.exists(ancestor):
        parent = os.path.dirname(ancestor)
        if parent == ancestor:
            break
        ancestor = parent
    if not os.path.isdir(ancestor):
        problems.error(fld, f"the result dir {path} cannot be created: {ancestor} is not a directory")
    elif not os.access(ancestor, os.W_OK | os.X_OK):
        problems.error(fld, f"the result dir {path} cannot be created: {ancestor} is not writable")


# Length caps per field: no real value comes near them, and they bound every parser's time.
FIELD_MAX_CHARS = {"exp_purpose": 2_000, "exp_codebase_dir": 4_096, "exp_venv_exe": 4_096, "exp_yaml_path": 4_096,
                   "exp_result_dir": 4_096, "exp_launch_command": LAUNCH_COMMAND_MAX_CHARS,
                   "exp_max_time": DURATION_MAX_CHARS}


def _check_lengths(bp: Blueprint, problems: _Problems) -> None:
    for fld, cap in FIELD_MAX_CHARS.items():
        value = bp.exp_max_time_text if fld == "exp_max_time" else getattr(bp, fld)
        if len(value) > cap:
            problems.error(fld, f"{fld} is {len(value):,} characters long; at most {cap:,} are accepted")


def _check_max_time(bp: Blueprint, problems: _Problems) -> None:
    secs, text = bp.exp_max_time_seconds, bp.exp_max_time_text
    if len(text) > DURATION_MAX_CHARS:
        return  # reported by _check_lengths
    if secs is None and text.strip():
        problems.error("exp_max_time", f"cannot read a duration from {text!r}: write it like `12 hours`")
    elif secs is not None and secs <= 0:
        problems.error("exp_max_time", f"the maximum run time must be positive, got {format_limit(secs)}"
                       + (f" from {text!r}" if text else ""))


def _mentions_yaml(bp: Blueprint) -> bool:
    cmd = bp.exp_launch_command
    written = bp.exp_yaml_path.strip()
    candidates = {written, os.path.basename(written), bp.yaml_abspath()}
    if os.path.isabs(written) and os.path.isabs(bp.exp_codebase_dir):
        candidates.add(os.path.relpath(written, bp.exp_codebase_dir))
    return any(c and c in cmd for c in candidates)


_TEMPLATE_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w.-]*)\s*\}\}")


def _check_placeholders(bp: Blueprint, problems: _Problems) -> bool:
    """A template (`{{CODEBASE}}`, `{{RESULT_DIR}}` left in) names each placeholder per field."""
    found = False
    for fld in BLUEPRINT_FIELDS:
        value = bp.exp_max_time_text if fld == "exp_max_time" else getattr(bp, fld)
        names = list(dict.fromkeys(_TEMPLATE_PLACEHOLDER.findall(value or "")))
        if names:
            found = True
            listed = ", ".join("{{" + n + "}}" for n in names)
            problems.error(fld, f"{fld} still holds the template placeholder(s) {listed}: "
                           "this blueprint is a template; replace them with real values")
    return found


def validate_blueprint(bp: Blueprint, *, check_disk: bool = True) -> list[Problem]:
    """Everything that keeps `bp` from running (errors) or looks wrong (warnings).

    With `check_disk`, paths are checked on this machine; nothing is created.
    """
    problems = _Problems()
    if bp.source_lines > BLUEPRINT_MAX_LINES:
        problems.error("blueprint", f"the blueprint has {bp.source_lines:,} lines; at most {BLUEPRINT_MAX_LINES:,} "
                       "are read (put long notes in a file and name it)")
    _check_lengths(bp, problems)
    _check_missing(bp, problems)
    if _check_placeholders(bp, problems):
        return list(problems)  # a template: nothing else can be judged yet
    if bp.exp_codebase_dir and _check_absolute(bp, "exp_codebase_dir", problems) and check_disk:
        _check_codebase(bp.exp_codebase_dir, problems)
    if bp.exp_venv_exe and _check_absolute(bp, "exp_venv_exe", problems) and check_disk:
        _check_venv_exe(bp.exp_venv_exe, problems)
    if bp.exp_yaml_path:
        _check_yaml(bp, check_disk, problems)
    if bp.exp_launch_command and bp.exp_yaml_path and not _mentions_yaml(bp):
        problems.warning("exp_launch_command", f"the launch command does not mention the YAML "
                         f"{bp.exp_yaml_path!r}: check that it trains with that config")
    if bp.exp_result_dir and _check_absolute(bp, "exp_result_dir", problems) and check_disk:
        _check_result_dir(bp.exp_result_dir, problems)
    _check_max_time(bp, problems)
    if bp.exp_swarm_declared or bp.exp_swarm_server:
        spec = swarm_spec(bp)
        if spec is None:  # the part is there but holds no command
            problems.error("exp_swarm_server", "the swarm server command is empty: give the command "
                           "that starts it, e.g. `ajet-swarm start --swarm-port=10086`")
        problems.extend(swarm_problems(bp, spec))
    return list(problems)


def load_blueprint(path: str | Path, *, check_disk: bool = True) -> tuple[Blueprint, list[Problem]]:
    """Read, parse and validate a blueprint file; an unreadable file is a problem, not an exception."""
    try:
        text = Path(path).read_bytes().decode("utf-8", errors="replace")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        problems = _Problems()
        problems.error("blueprint", f"cannot read the blueprint {path}: {reason}")
        return Blueprint(), list(problems)
    bp = parse_blueprint(text)
    return bp, validate_blueprint(bp, check_disk=check_disk)
