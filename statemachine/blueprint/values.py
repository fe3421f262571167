"""Value heuristics of the blueprint parser: a path, a YAML path, free text, a leading label.

A part's section is found by the markdown structure (`blueprint.py`); these cleaners read its
value out of the text: drop a label ("主实验代码路径（绝对路径）："), take the path token, keep a
free text as written. A path never changes silently: text left after it on its line is either a
remark of a known shape (`(…)` closing the line, ` — …`, ` # …`, `, …`) or an error that names
the part that would be kept and the part that would be dropped.

String methods and anchored, non-backtracking regexes only: every cleaner is linear in its input.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from ajet_runner.statemachine.blueprint.tags import FIELD_KEYWORDS

__all__ = ["PATH_PART_LINES", "PathRead", "is_placeholder", "na_value", "read_path", "notes_under_path",
           "strip_label", "unquote", "extract_text", "clean_token"]

# A path part's value is looked for in its first lines; a part longer than that is prose.
PATH_PART_LINES = 200

_HINT_LINE = re.compile(r"e\.g\.|\be\.g\b|for example|例如|比如|such as|举例|默认|default:", re.IGNORECASE)
_LABEL_ONLY_FORBIDDEN = re.compile(r"[/=`$]|\s-|\.\w|&&")
_LABEL_FORBIDDEN = re.compile(r"`|&&|\s--?\w|=|\||\$")
_LABEL_SEP = re.compile(r"[:：](?!//)(?!\d)")
_PLACEHOLDERS = {"", "n/a", "na", "none", "null", "nil", "tbd", "todo", "-", "--", "无", "暂无", "未知",
                 "(none)", "（无）", "不适用"}
_NA_WORDS = ("n/a", "na", "none", "无", "不适用", "-")
_TOKEN_SPLIT = re.compile(r"[\s，。；、（）()<>「」\"“”'‘’]+")
_PROSE_LINE = re.compile(r"(?:note|notes|注意|注|说明|备注|remark|ps|tip|提示)\s*[:：]", re.IGNORECASE)
_PYTHON_NAME = re.compile(r"python[\d.]*", re.IGNORECASE)
_BACKTICK_SPAN = re.compile(r"`([^`\n]+)`")
_MAY_SCORE = re.compile(r"[/~$]|ya?ml|python", re.IGNORECASE)
_WORD = re.compile(r"\w")
_FENCE_STARTS = ("```", "~~~")
_TRAILING_PUNCT = ".,;:!?。，；：]】》"
_LEADING_PUNCT = "[【《"


def is_placeholder(value: str) -> bool:
    return value.strip().strip("`*_ ").lower() in _PLACEHOLDERS


def na_value(value: str) -> bool:
    """`NA`, `N/A`, `无`, ... possibly followed by an explanation (`NA（swarm 模式…）`, `NA, the client ...`)."""
    s = value.strip().strip("`*_ ").lower()
    for word in _NA_WORDS:
        if s.startswith(word):
            nxt = s[len(word): len(word) + 1]
            if not nxt or nxt in "(（,，:：;；-—–" or nxt.isspace():
                return True
    return False


def _is_fence_line(line: str) -> bool:
    return line.lstrip(" \t")[:3] in _FENCE_STARTS


def strip_label(text: str, fld: str) -> str:
    """Drop a leading description of the field: "主实验代码路径（绝对路径）： /x" -> "/x"."""
    keywords = FIELD_KEYWORDS[fld]
    lines = text.split("\n")
    idx = next((k for k, ln in enumerate(lines) if ln.strip()), None)
    if idx is None:
        return ""
    lines[idx] = _after_label(lines[idx], keywords)
    first = lines[idx].strip()
    label_only = len(first) <= 80 and keywords.search(first) and not _LABEL_ONLY_FORBIDDEN.search(first)
    if any(ln.strip() for ln in lines[idx + 1:]) and (not first or label_only):
        lines[idx] = ""
    return "\n".join(lines).strip("\n")


def _after_label(first: str, keywords: re.Pattern[str]) -> str:
    """`first` past its leading label (the field's keywords before a colon, in its first 120 characters)."""
    for sep in _LABEL_SEP.finditer(first, 0, 121):
        prefix = first[: sep.start()]
        if keywords.search(prefix) and not _LABEL_FORBIDDEN.search(prefix):
            return first[sep.end():].strip()
    return first


def clean_token(tok: str) -> str:
    """A token without backticks, bold/italic stars and sentence punctuation around it (string methods:
    `re.sub(r"^\\*+|\\*+$")` was quadratic on a run of `*` inside a token)."""
    tok = tok.strip().strip("`").strip().strip("*")
    return tok.rstrip(_TRAILING_PUNCT).lstrip(_LEADING_PUNCT)


def _path_score(tok: str, fld: str) -> int:
    """How much `tok` looks like this field's value (0 = not at all)."""
    if _never_a_value(tok):
        return 0
    pathish = tok.startswith(("/", "~", "$", "./", "../")) or "/" in tok
    if fld == "exp_yaml_path":
        return 3 if tok.lower().endswith((".yaml", ".yml")) else (1 if pathish else 0)
    if fld == "exp_venv_exe":
        if _PYTHON_NAME.fullmatch(os.path.basename(tok)):
            return 3
        return 1 if pathish else 0
    return 2 if pathish else 0


def _never_a_value(tok: str) -> bool:
    """Empty, a URL, a placeholder or without a word character: no field's value."""
    return not tok or "://" in tok or is_placeholder(tok) or _WORD.search(tok) is None


def _prose_cut(s: str) -> int:
    """Where prose starts after a bare path: at ` (`, ` #`, ` - ` / ` — ` or `, ` / `; ` (-1: nowhere).
    One pass: `\\s+[(（#]|\\s+[-—–]+\\s|[,，;；]\\s` was quadratic on a long run of spaces."""
    n = len(s)
    i = 0
    while i < n:
        ch = s[i]
        if ch in ",，;；" and i + 1 < n and s[i + 1].isspace():
            return i
        if not ch.isspace():
            i += 1
            continue
        j = i
        while j < n and s[j].isspace():
            j += 1
        if _remark_opens(s, j):
            return i
        i = j
    return -1


def _remark_opens(s: str, j: int) -> bool:
    """Whether a remark opens at `j`, just past a run of spaces: `(`, `#`, or dashes followed by a space."""
    n = len(s)
    if j < n and s[j] in "(（#":
        return True
    k = j
    while k < n and s[k] in "-—–":
        k += 1
    return j < k < n and s[k].isspace()


def _whole_path(line: str) -> str:
    """An absolute path written bare, kept whole through spaces and `#(`: `/mnt/my data/code`.

    Only when what follows the first space is itself a path piece (holds a `/`) or the path
    holds `(`; prose after a path (`/x (the repo)`, `/x, see below`) still ends it.
    """
    stripped = line.strip().strip("`*").strip()
    if "`" in stripped or not stripped.startswith(("/", "~")):
        return ""
    cut_at = _prose_cut(stripped)
    cut = (stripped if cut_at < 0 else stripped[:cut_at]).strip()
    parts = cut.split()
    if (len(parts) > 1 and all("/" in part for part in parts[1:])) or "(" in cut:
        return clean_token(cut)
    return ""


def _line_candidates(line: str) -> list[str]:
    whole = _whole_path(line)
    if whole:
        return [whole]
    spans = [s.strip() for s in _BACKTICK_SPAN.findall(line)]
    tokens = [clean_token(t) for t in _TOKEN_SPLIT.split(_BACKTICK_SPAN.sub(" ", line))]
    return [s for s in spans if s] + [t for t in tokens if t]


@dataclass
class PathRead:
    """A path part's value: the path, whether it is only an example, what followed it on its line."""

    value: str = ""
    example_only: bool = False
    line: str = ""  # the line it was read from
    remark: str = ""  # a remark after it (kept as a note)
    dropped: str = ""  # text after it that is no remark: the value is not certain (an error)


def read_path(text: str, fld: str) -> PathRead:
    """The first path-like token of `text`, preferring typical names, and what follows it on its line."""
    text = strip_label(text, fld)
    lines = [ln for ln in text.split("\n")[:PATH_PART_LINES] if ln.strip() and not _is_fence_line(ln)]
    hint_lines = [ln for ln in lines if _HINT_LINE.search(ln)]
    hints = set(hint_lines)  # `ln in` a list of them made this quadratic
    best, best_line = _best_scored([ln for ln in lines if ln not in hints] + hint_lines, fld)
    if not best:
        best, best_line = _bare_value(lines)
    if not best:
        return PathRead()
    read = PathRead(value=_expand(best), example_only=best_line in hints, line=best_line)
    read.remark, read.dropped = _after_path(best_line, best)
    return read


def _best_scored(ordered: list[str], fld: str) -> tuple[str, str]:
    """(token, its line) scoring highest for `fld`, lines read in order until one scores 2 or more
    (a path); ("", "") when no token scores."""
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
    return best, best_line


def _bare_value(lines: list[str]) -> tuple[str, str]:
    """A bare relative value such as "codebase" or "python3": the first line's only token, with that line."""
    for ln in lines[:1]:
        cands = _line_candidates(ln)
        if len(cands) == 1 and not is_placeholder(cands[0]):
            return cands[0], ln
    return "", ""


def _after_path(line: str, token: str) -> tuple[str, str]:
    """(remark, dropped): the text after `token` on `line`, as a remark of a known shape or as text
    that makes the value uncertain."""
    tail = None
    for written in (f"`{token}`", token):
        at = line.find(written)
        while at >= 0:
            end = at + len(written)
            if end >= len(line) or not (line[end].isalnum() or line[end] in "/._-~"):
                tail = line[end:]
                break
            at = line.find(written, at + 1)
        if tail is not None:
            break
    if tail is None:
        return "", ""
    tail = tail.strip().strip("*_").strip()
    if not tail.strip(_TRAILING_PUNCT + "`*_ "):
        return "", ""
    if _is_remark(tail):
        return tail.lstrip(",，;；").strip(), ""
    return "", tail


def _is_remark(tail: str) -> bool:
    """A separate remark after a path: `(…)` that closes the line, ` — …`, ` - …`, ` # …`, `, …`, `; …`."""
    if tail[0] in ",，;；":
        return True
    if tail[0] == "#" and tail[1:2].isspace():
        return True
    if tail[0] in "-—–":
        rest = tail.lstrip("-—–")
        return bool(rest) and rest[0].isspace()
    if tail[0] in "(（":
        return _one_closing_group(tail.rstrip(".,;:!?。，；： "))
    return False


def _one_closing_group(body: str) -> bool:
    """Whether `body`, opening with a parenthesis, is one group that closes at its end."""
    if body[-1:] not in (")", "）"):
        return False
    depth = 0
    for k, ch in enumerate(body):
        depth += 1 if ch in "(（" else -1 if ch in ")）" else 0
        if depth == 0:
            return k == len(body) - 1  # the first group closes at the end: one remark
    return False


def notes_under_path(text: str, fld: str) -> str:
    """Prose written under a path part besides its value (a line without any path-like token,
    e.g. "Note: this YAML needs 4 GPUs"): kept in the blueprint's notes, not dropped.
    Lines past the first `PATH_PART_LINES` are not read for a path: all kept as notes."""
    lines = strip_label(text, fld).split("\n")
    kept = [body for ln in lines[:PATH_PART_LINES] if (body := ln.strip()) and not _path_part_line(ln, body, fld)]
    kept.extend(body for ln in lines[PATH_PART_LINES:] if (body := ln.strip()))
    return "\n".join(kept)


def _path_part_line(ln: str, body: str, fld: str) -> bool:
    """Whether line `ln` (stripped: `body`, not empty) belongs to the part, not its notes: a fence, an
    example hint, a path that is not a sentence, or a label on its own line."""
    if _is_fence_line(ln) or _HINT_LINE.search(ln):
        return True
    if _PROSE_LINE.match(body):
        return False
    if _MAY_SCORE.search(ln) is not None and any(_path_score(c, fld) for c in _line_candidates(ln)):
        return True
    return len(body) <= 80 and bool(FIELD_KEYWORDS[fld].search(body)) and body.endswith((":", "："))


def _expand(path: str) -> str:
    """`~` and environment variables that are set; unset ones stay visible."""
    return os.path.expanduser(os.path.expandvars(path))


def unquote(value: str) -> str:
    """A value written YAML-style: `"..."`, `'...'`, or a `|` / `>` block."""
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" and value[0] not in value[1:-1]:
        return value[1:-1]
    if value[:1] in ("|", ">"):
        first, sep, rest = value.partition("\n")
        if sep and first[1:].lstrip("-+").strip() == "":
            return rest
    return value


def extract_text(text: str, fld: str) -> str:
    return unquote(strip_label(text, fld))
