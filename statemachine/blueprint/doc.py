"""A blueprint's markdown structure, from a real tokenizer (markdown-it-py), as per-line facts.

The parser needs to know, for every source line, what markdown makes of it: a heading (and its
level), the first line of a list item (its indentation, numbered or not, where the item ends), a
line inside a fenced or indented code block, blank, or text; and, for list items and code blocks,
the blocks themselves (a list's items, a fence's content). markdown-it-py gives that with line
maps. Only its block rules run (no inline parsing: values are read from the source lines, where
a `\\` at a line's end is still a continuation and not a hard line break).

The tokenizer's cost is per line and per nesting level, so the text is capped by
`blueprint.BLUEPRINT_MAX_LINES` before it comes here and nesting is capped by `MAX_NESTING`.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

__all__ = ["Block", "Doc", "parse_doc", "unwrap", "dedent", "MAX_NESTING"]

# Tokens nest at most this deep (a list in a list is 4 levels): markdown-it stops descending there,
# and deeper text stays inside its outer block. Real blueprints nest 2-3 lists; 100 KB of nested list
# markers took 150 ms at markdown-it's default of 20.
MAX_NESTING = 10
_UNWRAP_DEPTH = 3  # ```markdown fences inside ```markdown fences: nobody writes more; each level re-reads all


def _tokenizer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"maxNesting": MAX_NESTING})
    md.core.ruler.disable(["inline", "text_join"], ignoreInvalid=True)
    # `[exp_codebase_dir]: /c` is a tag, not a link reference definition; raw HTML is text.
    md.block.ruler.disable(["html_block", "reference"])
    return md


_MD = _tokenizer()


@dataclass
class Block:
    """One block of the document: `kind` is heading, paragraph, list, item, fence, code, quote or hr."""

    kind: str
    start: int
    end: int  # exclusive
    level: int = 0  # heading level
    ordered: bool = False  # list / item
    info: str = ""  # fence info string
    content: str = ""  # fence or code content
    children: list[Block] = field(default_factory=list)


@dataclass
class Doc:
    """The lines of a blueprint and what markdown makes of each."""

    lines: list[str]  # source lines, blockquote markers removed
    blocks: list[Block]  # top-level blocks
    heading: list[int]  # heading level of the line (0: not a heading's text line)
    underline: list[bool]  # the underline of a setext heading
    code: list[bool]  # inside (or delimiting) a fenced or indented code block
    item: dict[int, Block]  # first line -> the outermost list item starting there
    list_of: dict[int, Block]  # first line of a list -> the list
    code_at: dict[int, Block]  # first line -> the fence or code block
    nesting_cut: int = -1  # a line where markdown-it stopped descending (deeper text left unread), or -1

    def item_indent(self, i: int) -> int:
        line = self.lines[i]
        return len(line) - len(line.lstrip(" \t"))


def parse_doc(text: str) -> Doc:
    """Tokenize `text` (already capped and unwrapped) into per-line facts.

    An unclosed fence is text, not a code block running to the end (CommonMark's reading): a missing
    closer must not swallow the parts after it. Such openers are escaped for the tokenizer only.
    """
    raw = text.split("\n")
    unclosed = _unclosed_openers(raw)
    if unclosed:
        shown = list(raw)
        for i in unclosed:
            body = shown[i].lstrip(" \t")
            shown[i] = shown[i][: len(shown[i]) - len(body)] + "\\" + body
        text = "\n".join(shown)
    builder = _DocBuilder(len(raw))
    for tok in _MD.parse(text):
        builder.token(tok)
    return builder.doc(raw)


def _nests_too_deep(tok: Token) -> bool:
    """A list or quote opening at the depth past which markdown-it reads nothing inside."""
    return tok.nesting == 1 and tok.level >= MAX_NESTING - 1 and tok.type in _CONTAINERS


class _DocBuilder:
    """The per-line facts, filled in token by token (one branch per markdown construct)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.quote_delta = [0] * (n + 1)
        self.heading = [0] * n
        self.underline = [False] * n
        self.code = [False] * n
        self.item: dict[int, Block] = {}
        self.list_of: dict[int, Block] = {}
        self.code_at: dict[int, Block] = {}
        self.root = Block("root", 0, n)
        self.stack: list[Block] = [self.root]
        self.cut = -1

    def close(self) -> None:
        """The innermost open block ends; the root never does (a stray closing token)."""
        if len(self.stack) > 1:
            self.stack.pop()

    def token(self, tok: Token) -> None:
        where = tok.map
        if _nests_too_deep(tok) and self.cut < 0:
            self.cut = where[0] if where else 0  # markdown-it reads nothing inside: the rest is one block
        if tok.nesting == 1:
            self.open(tok)
        elif tok.nesting == -1:
            self.close()
        elif tok.type in ("fence", "code_block") and where:
            self.code_block(tok, where[0], where[1])
        elif tok.type == "hr" and where:
            self.stack[-1].children.append(Block("hr", where[0], where[1]))

    def code_block(self, tok: Token, start: int, end: int) -> None:
        block = Block("fence" if tok.type == "fence" else "code", start, end, info=tok.info.strip(),
                      content=tok.content)
        self.stack[-1].children.append(block)
        self.code_at[start] = block
        for k in range(start, min(end, self.n)):
            self.code[k] = True

    def open(self, tok: Token) -> None:
        where = tok.map
        start, end = (where[0], where[1]) if where else (0, 0)
        kind = _KINDS.get(tok.type)
        if kind is None:  # table parts, thead, ...: not needed (table rows are read from the lines)
            self.stack.append(Block("other", start, end))
            return
        ordered = tok.type == "ordered_list_open" or (kind == "item" and tok.markup in (".", ")"))
        block = Block(kind, start, end, level=int(tok.tag[1]) if kind == "heading" else 0, ordered=ordered)
        self.stack[-1].children.append(block)
        self.stack.append(block)
        if where:
            self.mark(kind, block, start, end)

    def mark(self, kind: str, block: Block, start: int, end: int) -> None:
        """The per-line facts of an opened block that has lines."""
        if kind == "quote":
            self.quote_delta[start] += 1
            self.quote_delta[min(end, self.n)] -= 1
        elif kind == "heading":
            self.heading[start] = block.level
            if end - start == 2:
                self.underline[start + 1] = True
        elif kind == "item":
            self.item.setdefault(start, block)
        elif kind == "list":
            self.list_of.setdefault(start, block)

    def doc(self, raw: list[str]) -> Doc:
        return Doc(lines=_strip_quotes(raw, self.quote_delta), blocks=self.root.children, heading=self.heading,
                   underline=self.underline, code=self.code, item=self.item, list_of=self.list_of,
                   code_at=self.code_at, nesting_cut=self.cut)


_CONTAINERS = frozenset({"bullet_list_open", "ordered_list_open", "list_item_open", "blockquote_open"})
_KINDS = {
    "heading_open": "heading", "paragraph_open": "paragraph", "bullet_list_open": "list",
    "ordered_list_open": "list", "list_item_open": "item", "blockquote_open": "quote",
}


def _strip_quotes(raw: list[str], delta: list[int]) -> list[str]:
    """Lines with their blockquote markers (`> `, one per quote level) removed."""
    out: list[str] = []
    depth = 0
    for i, line in enumerate(raw):
        depth += delta[i]
        for _ in range(depth):
            s = line.lstrip(" ")
            if len(line) - len(s) > 3 or not s.startswith(">"):
                break
            line = s[2:] if s[1:2] == " " else s[1:]
        out.append(line)
    return out


def _fence_run(line: str) -> tuple[str, int, bool] | None:
    """(fence char, run length, whether it can close) of a fence-like line, else None."""
    s = line.lstrip(" \t")
    if s[:3] not in _FENCE_CHARS:
        return None
    char = s[0]
    run = len(s) - len(s.lstrip(char))
    rest = s[run:]
    if char == "`" and "`" in rest:
        return None  # not a fence in CommonMark: a backtick fence's info holds no backtick
    return char, run, not rest.strip()


def _unclosed_openers(lines: list[str]) -> list[int]:
    """Lines that open a fence no later line closes (same character, a run at least as long).

    Linear: only fence-like lines are looked at, and whether an opener has a closer below it comes
    from the longest closer run further down, without scanning for one.
    """
    opens, closers = _fence_lines(lines)
    if not opens:
        return []
    at = {ch: [j for j, _ in runs_of] for ch, runs_of in closers.items()}
    longest = {ch: _longest_from(runs_of) for ch, runs_of in closers.items()}
    unclosed: list[int] = []
    after = 0  # the first line not inside a block found so far
    for i, char, size in opens:
        if i < after:
            continue
        k = bisect.bisect_right(at[char], i)
        if longest[char][k] < size:
            unclosed.append(i)
            continue
        while closers[char][k][1] < size:
            k += 1
        after = closers[char][k][0] + 1
    return unclosed


def _fence_lines(lines: list[str]) -> tuple[list[tuple[int, str, int]], dict[str, list[tuple[int, int]]]]:
    """Every fence-like line as (line, char, run), and per fence character the (line, run) of those that
    may close a fence."""
    opens: list[tuple[int, str, int]] = []
    closers: dict[str, list[tuple[int, int]]] = {"`": [], "~": []}
    for i, line in enumerate(lines):
        found = _fence_run(line)
        if found is None:
            continue
        opens.append((i, found[0], found[1]))
        if found[2]:
            closers[found[0]].append((i, found[1]))
    return opens, closers


def _longest_from(runs_of: list[tuple[int, int]]) -> list[int]:
    """The longest closer run at or after each closer (of one fence character), 0 past the last."""
    runs = [0] * (len(runs_of) + 1)
    for k in range(len(runs_of) - 1, -1, -1):
        runs[k] = max(runs[k + 1], runs_of[k][1])
    return runs


# ------------------------------------------------------------------------------ unwrap

_INDENTED = re.compile(r"^[ \t]", re.MULTILINE)
_WHITESPACE_ONLY = re.compile(r"^[ \t]+$", re.MULTILINE)
_LEADING_WHITESPACE = re.compile(r"^[ \t]*(?=[^ \t\n])", re.MULTILINE)


def dedent(text: str) -> str:
    """`textwrap.dedent` (same result) without its per-line Python loop."""
    if _INDENTED.search(text) is None:
        return text
    text = _WHITESPACE_ONLY.sub("", text)
    margin = os.path.commonprefix(_LEADING_WHITESPACE.findall(text))
    if not margin:
        return text
    cut = len(margin)
    return "\n".join(line[cut:] if line.startswith(margin) else line for line in text.split("\n"))


_FENCE_CHARS = ("```", "~~~")


def _wrapper_opener(line: str) -> tuple[int, str, int] | None:
    """(indent, fence char, run length) of a ```markdown / ~~~md fence line, else None."""
    s = line.lstrip(" \t")
    if s[:3] not in _FENCE_CHARS:
        return None
    char = s[0]
    run = len(s) - len(s.lstrip(char))
    if s[run:].strip().lower() not in ("markdown", "md"):
        return None
    return len(line) - len(s), char, run


def _is_closer(line: str, indent: int, char: str, run: int) -> bool:
    s = line.lstrip(" \t")
    if len(line) - len(s) > indent or s[:3] != char * 3:
        return False
    body = s.rstrip(" \t")
    return len(body) >= run and body == char * len(body)


def unwrap(text: str, has_tags: Callable[[list[str]], bool], depth: int = 0) -> str:
    """The blueprint inside a ```markdown fence when the tags are only inside it; dedented.

    A wrapper closes at its LAST closing fence (an agent's wrapper often holds a ``` command block
    at the same indentation, which to markdown would close the wrapper early). At most
    `_UNWRAP_DEPTH` fences deep: each level reads the whole text again.
    """
    low = text.lower()
    if depth >= _UNWRAP_DEPTH or ("markdown" not in low and "md" not in low):
        return dedent(text)
    lines = text.split("\n")
    for i, (indent, char, run) in _wrapper_openers(lines):
        end = next((j for j in range(len(lines) - 1, i, -1) if _is_closer(lines[j], indent, char, run)), len(lines))
        inner = dedent("\n".join(lines[i + 1: end])).split("\n")
        if has_tags(inner) and not has_tags(lines[:i] + lines[end + 1:]):
            return unwrap("\n".join(inner), has_tags, depth + 1)
    return dedent(text)


def _wrapper_openers(lines: list[str]) -> list[tuple[int, tuple[int, str, int]]]:
    """The first three lines that open a ```markdown wrapper, with (indent, fence char, run)."""
    wrappers: list[tuple[int, tuple[int, str, int]]] = []
    for i, line in enumerate(lines):
        found = _wrapper_opener(line)
        if found is not None:
            wrappers.append((i, found))
            if len(wrappers) == 3:
                break
    return wrappers
