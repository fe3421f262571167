"""A launch command as a bash syntax tree (tree-sitter-bash), with the byte spans of every simple command.

tree-sitter-bash (MIT) reads what a launch command holds: `&&` / `;` / newline chains, pipelines,
subshells, `{ ...; }`, functions, `if` / `case` / loops, `[[ ]]`, `$((...))`, `$(...)` and
backticks, `<(...)`, heredocs, comments. Every position is a byte offset into the UTF-8 text, so a
rewrite splices byte ranges of the original and leaves everything else byte-identical. The grammar
is error-tolerant: what it cannot read becomes ERROR or MISSING nodes, reported here as
`Script.problems` (the caller refuses when they touch a launcher call), never silently dropped.

Three quirks of the grammar are undone here, so callers see bash's structure:
- words after a redirection's target (`cmd > log --flag`, `cmd 2>&1 -m x`) are arguments of the
  command, as in bash, not further targets;
- what follows a heredoc's delimiter on its line (`cat <<EOF --x`, `bash <<EOF | tee y`,
  `bash <<EOF && z`) belongs to the command, its pipeline or the chain, not to the heredoc;
- a redirection of a compound command (`{ echo x; } > f`) applies to every command inside it.

There is no lexer here: quote removal reads the tree's leaves (`word`, `raw_string`, `string_content`)
and only undoes their backslash escapes.

`tree_sitter` is imported on the first parse, not with this module: the CLI's `--help` does not
load the grammar.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

__all__ = [
    "EXPOSED_CONTEXT", "INERT_CONTEXT", "Command", "Heredoc", "Region", "Script", "Segment", "SyntaxProblem", "Word",
    "decode", "encode", "parse", "unquote",
]

_EXPANSIONS = frozenset({
    "simple_expansion", "expansion", "command_substitution", "process_substitution", "arithmetic_expansion",
    "ansi_c_string", "translated_string", "brace_expression",
})
_SUBSTITUTIONS = frozenset({"command_substitution", "process_substitution"})
_REDIRECTS = frozenset({"file_redirect", "heredoc_redirect", "herestring_redirect"})
_CHAIN_TOKENS = frozenset({"&&", "||", ";", ";;", "&", "\n"})
_PIPE_TOKENS = frozenset({"|", "|&"})
_NOT_A_FILE = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr"})
_WORD_ESCAPE = re.compile(r"\\(\n|.)", re.S)
_DQ_ESCAPE = re.compile(r'\\([$`"\\\n])')
# Contexts whose output is captured: a command there is "captured in" the command whose argument holds
# the substitution (index >= 0), in a test or case pattern (INERT_CONTEXT), or anywhere else (EXPOSED_CONTEXT).
EXPOSED_CONTEXT = -1
INERT_CONTEXT = -2


@cache
def _parser() -> Parser:
    from tree_sitter import Language, Parser
    from tree_sitter_bash import language

    return Parser(Language(language()))


@dataclass(frozen=True)
class Word:
    """One word as written (`raw`, its byte span) and as bash sees it once unquoted (`value`)."""

    value: str
    raw: str
    start: int
    end: int
    expanded: bool  # holds an expansion bash resolves only at run time ($X, $(..), <(..), $((..)), globs, braces)
    quoted_whole: bool  # one double-quoted string (`"$X"`): never split into several words
    gap: int = -1  # where the blank before it starts (end of the command's previous word or redirection)


@dataclass(frozen=True)
class Heredoc:
    """A heredoc body (byte span of the body lines, terminator excluded) and whether bash expands it."""

    body: str
    start: int
    end: int
    literal: bool  # the delimiter was quoted: no expansion in the body


@dataclass
class Command:
    """A simple command: its words (leading assignments apart), its span, and what feeds or takes it."""

    words: list[Word]
    assignments: list[Word]
    start: int
    end: int
    heredocs: list[Heredoc] = field(default_factory=list)
    herestrings: list[Word] = field(default_factory=list)  # `<<< word`: the word is fed to its stdin
    writes_file: bool = False  # stdout or stderr redirected to a file (also by an enclosing `{ ...; } > f`)
    piped_in: bool = False  # not the first command of a pipeline (or inside such a command)
    piped_out: bool = False  # its output goes into another command
    captured_in: int | None = None  # inside `$(...)`/`<(...)`: see EXPOSED_CONTEXT; None when not captured


@dataclass(frozen=True)
class Region:
    """A span that is no command word: a comment, a test or case pattern (inert), a redirection target."""

    start: int
    end: int
    kind: str  # "comment" | "inert"


@dataclass(frozen=True)
class SyntaxProblem:
    """What tree-sitter could not read: an ERROR node (unexpected text) or a MISSING one (say, `fi`)."""

    start: int
    end: int
    message: str


@dataclass(frozen=True)
class Segment:
    """One command of the top-level chain (split on `&&`, `||`, `;`, `&`, newlines); `owns` also covers
    the heredoc bodies that belong to it."""

    start: int
    end: int
    owns: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Script:
    """The parse of one text: bytes, simple commands in source order, regions, problems, top-level chain."""

    data: bytes
    commands: tuple[Command, ...]
    regions: tuple[Region, ...]
    problems: tuple[SyntaxProblem, ...]
    segments: tuple[Segment, ...]
    statements: tuple[tuple[int, int], ...]  # spans of the program's top-level nodes

    def text(self, start: int, end: int) -> str:
        return decode(self.data[start:end])


def encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


_NON_ASCII = re.compile(rb"[\x80-\xff]")


def _ascii_shape(data: bytes) -> bytes:
    """`data` with every non-ASCII byte as `%`, for the parser only: tree-sitter-bash 0.25.1 segfaults at
    random (an out-of-bounds read) on `{` before a code point far above the BMP (U+7A000, U+C1E8F, U+F0000
    measured), and one blueprint would take a whole API or worker process down. Every shell metacharacter
    is ASCII and `%` is a word character that starts no name (`é=1` stays no assignment), so the tree is
    the same and its byte offsets index the original bytes, which are what the walk reads."""
    return _NON_ASCII.sub(b"%", data) if not data.isascii() else data


def decode(data: bytes) -> str:
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return data.decode("utf-8", "replace")


class _Ctx(NamedTuple):
    piped_in: bool = False
    piped_out: bool = False
    writes_file: bool = False
    captured_in: int | None = None
    target: int = EXPOSED_CONTEXT  # where the output of a substitution met below would go


# ----------------------------------------------------------------------------------- word values


def _raw(node: Node, data: bytes) -> str:
    return decode(data[node.start_byte : node.end_byte])


def _joined(node: Node, data: bytes, piece: str) -> str:
    """The value of `node` from its children's values; the bytes between children kept as written, or
    unescaped the double-quote way (`piece == "dq"`) inside a string."""
    out: list[str] = []
    at = node.start_byte
    for child in node.children:
        if child.start_byte > at:
            gap = decode(data[at : child.start_byte])
            out.append(_DQ_ESCAPE.sub(_drop_escape, gap) if piece == "dq" else gap)
        if piece == "dq" and child.type == '"':
            pass
        elif piece == "dq" and child.type == "string_content":
            out.append(_DQ_ESCAPE.sub(_drop_escape, _raw(child, data)))
        else:
            out.append(_value(child, data))
        at = max(at, child.end_byte)
    if node.end_byte > at:
        out.append(decode(data[at : node.end_byte]))
    return "".join(out)


def _drop_escape(m: re.Match[str]) -> str:
    return "" if m.group(1) == "\n" else m.group(1)


def _value(node: Node, data: bytes) -> str:
    """The text bash makes of `node` once quotes and escapes are removed; expansions stay as written."""
    kind = node.type
    if kind == "word":
        return _WORD_ESCAPE.sub(_drop_escape, _raw(node, data))
    if kind == "raw_string":
        return _raw(node, data)[1:-1]
    if kind == "string":
        return _joined(node, data, "dq")
    if kind in _EXPANSIONS or not node.children:
        return _raw(node, data)
    return _joined(node, data, "")


def _bare(node: Node, data: bytes) -> str:
    """The unquoted literal text of a word (to spot the globs and braces bash expands)."""
    if node.type == "word":
        return _WORD_ESCAPE.sub("", _raw(node, data))
    if node.type == "concatenation":
        return "".join(_bare(c, data) for c in node.children)
    return ""


def _has_expansion(node: Node) -> bool:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in _EXPANSIONS:
            return True
        if n.type in ("string", "concatenation", "variable_assignment", "array"):
            stack.extend(n.children)
    return False


def _is_test(node: Node) -> bool:
    """`[[ ]]`, `[ ]` or `(( ))`: compared or computed, never run."""
    kind = node.type
    return kind == "test_command" or bool(kind == "compound_statement" and node.child_count
                                          and node.children[0].type == "((")


def _hung_on_heredoc(child: Node, after_tail: bool) -> list[Node] | None:
    """What the grammar hangs on a heredoc from the delimiter's line: a `&&` chain or `|` pipeline (and all
    after it), as nodes to walk; None for a part of the command itself."""
    kind = child.type
    if after_tail or kind in _CHAIN_TOKENS or kind in _PIPE_TOKENS:
        return [child]
    if kind == "pipeline" and child.child_count and child.children[0].type in _PIPE_TOKENS:
        return list(child.children)
    return None


def _quoted_delimiter(start: Node, data: bytes) -> bool:
    """Whether a heredoc's delimiter is quoted (`<<'EOF'`, `<<\\EOF`): its body is then taken literally."""
    return any(c in _raw(start, data) for c in "'\"\\")


def _not_a_word(child: Node) -> bool:
    """A parse error, a missing node or an unnamed token: no word of the command."""
    return child.type == "ERROR" or child.is_missing or not child.is_named


def _writes_to_file(op: str, target: str) -> bool:
    """Whether output redirection `op` to `target` writes a file (not a descriptor copy, a close or a device)."""
    return not ((op in (">&", "<&") and (target.isdigit() or target == "-")) or target in _NOT_A_FILE)


def _word(node: Node, data: bytes, gap: int) -> Word:
    bare = _bare(node.child_by_field_name("value") or node, data) if node.type == "variable_assignment" \
        else _bare(node, data)
    expanded = (
        _has_expansion(node)
        or any(c in bare for c in "*?[$")
        or ("{" in bare and ("," in bare or ".." in bare))
    )
    return Word(_value(node, data), _raw(node, data), node.start_byte, node.end_byte, expanded,
                node.type == "string", gap if gap >= 0 else node.start_byte)


def unquote(raw: str) -> str:
    """The value bash makes of `raw` read as one word (quotes and escapes removed): `-""-autokill` -> `--autokill`."""
    script = parse(": " + raw)
    for cmd in script.commands:
        if cmd.words and cmd.words[0].raw == ":":
            return " ".join(w.value for w in cmd.words[1:])
    return raw


# ----------------------------------------------------------------------------------- the walk


class _Walk:
    """One pass over the tree, in source order, with an explicit stack (a 10,000-character command can
    nest thousands of `$(` deep)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.commands: list[Command] = []
        self.regions: list[Region] = []
        self.stack: list[tuple[Node, _Ctx]] = []

    def run(self, root: Node) -> None:
        self.stack.append((root, _Ctx()))
        while self.stack:
            node, ctx = self.stack.pop()
            self.visit(node, ctx)

    def push(self, nodes: list[Node], ctx: _Ctx) -> None:
        self.stack.extend((n, ctx) for n in reversed(nodes))

    def region(self, node: Node, kind: str, start: int | None = None) -> None:
        self.regions.append(Region(node.start_byte if start is None else start, node.end_byte, kind))

    def visit(self, node: Node, ctx: _Ctx) -> None:
        kind = node.type
        if kind == "comment":
            self.region(node, "comment")
        elif kind == "command":
            self.command(node, [], ctx)
        elif kind == "redirected_statement":
            self.redirected(node, ctx)
        elif kind == "pipeline":
            self.pipeline(node.children, ctx)
        elif kind in _SUBSTITUTIONS:
            # Its commands' output is captured into the word that holds it (ctx.target).
            self.push(node.children, ctx._replace(captured_in=ctx.target, target=EXPOSED_CONTEXT, writes_file=False))
        elif kind in ("variable_assignment", "variable_assignments"):
            self.assignments(node, ctx)
        elif kind in ("declaration_command", "unset_command"):
            self.declaration(node, ctx)
        elif _is_test(node):
            self.region(node, "inert")  # `[[ ]]`, `[ ]`, `(( ))`: compared or computed, never run
            self.push(node.children, ctx._replace(target=INERT_CONTEXT))
        elif kind == "case_statement":
            self.case(node, ctx)
        else:
            self.push(node.children, ctx)

    def pipeline(self, nodes: list[Node], ctx: _Ctx) -> None:
        """The commands of a pipeline (`nodes` without its `|` tokens): each but the first reads a pipe, each
        but the last writes one."""
        elements = [c for c in nodes if c.type not in _PIPE_TOKENS]
        last = len(elements) - 1
        for k in range(last, -1, -1):
            self.stack.append((elements[k], ctx._replace(piped_in=ctx.piped_in or k > 0,
                                                         piped_out=ctx.piped_out or k < last)))

    def case(self, node: Node, ctx: _Ctx) -> None:
        """`case WORD in PATTERN) ...;; esac`: the word and the patterns are only compared."""
        inert = ctx._replace(target=INERT_CONTEXT)
        subject = node.child_by_field_name("value")
        items: list[tuple[Node, _Ctx]] = []
        for child in node.children:
            if subject is not None and child.id == subject.id:
                self.region(child, "inert")
                items.append((child, inert))
            elif child.type == "case_item":
                patterns = {p.id for p in child.children_by_field_name("value")}
                for c in child.children:
                    if c.id in patterns:
                        self.region(c, "inert")
                    items.append((c, inert if c.id in patterns else ctx))
            else:
                items.append((child, ctx))
        self.stack.extend(reversed(items))

    def assignments(self, node: Node, ctx: _Ctx) -> None:
        """`A=1 B=$(x)` alone on a statement: a command with assignments and no words."""
        parts = [node] if node.type == "variable_assignment" else \
            [c for c in node.children if c.type == "variable_assignment"]
        self.commands.append(Command([], [_word(p, self.data, -1) for p in parts], node.start_byte, node.end_byte,
                                     writes_file=ctx.writes_file, piped_in=ctx.piped_in, piped_out=ctx.piped_out,
                                     captured_in=ctx.captured_in))
        self.push([c for p in parts for c in p.children], ctx._replace(target=EXPOSED_CONTEXT))

    def declaration(self, node: Node, ctx: _Ctx) -> None:
        """`export A=1 B`, `local x`, `declare -a y=(..)`, `unset z`: a command whose words are its arguments."""
        index = len(self.commands)
        words, at = [], node.start_byte
        for child in node.children:
            if child.type != "comment":
                words.append(_word(child, self.data, at))
                at = child.end_byte
        self.commands.append(Command(words, [], node.start_byte, node.end_byte, writes_file=ctx.writes_file,
                                     piped_in=ctx.piped_in, piped_out=ctx.piped_out, captured_in=ctx.captured_in))
        self.push([c for child in node.children for c in _inside(child)], ctx._replace(target=index))

    def redirected(self, node: Node, ctx: _Ctx) -> None:
        body = node.child_by_field_name("body")
        redirects = [c for c in node.children if body is None or c.id != body.id]
        if body is None or body.type == "command":
            self.command(body, redirects, ctx)
        else:
            self.redirected_compound(node, body, redirects, ctx)

    def redirected_compound(self, node: Node, body: Node, redirects: list[Node], ctx: _Ctx) -> None:
        """A compound (`{ ...; }`, a loop, a subshell) with redirections: they apply to everything inside."""
        holder = Command([], [], node.start_byte, node.end_byte, captured_in=ctx.captured_in)
        later: list[tuple[Node, _Ctx]] = []
        tail: list[Node] = []
        for r in redirects:
            tail += self.redirection(r, holder, EXPOSED_CONTEXT, ctx, later)
        if holder.words or holder.heredocs or holder.herestrings:
            self.commands.append(holder)  # data fed to a compound, words after a target: nobody runs them
        self.follow(tail, holder, ctx)
        self.stack.extend(reversed(later))
        self.stack.append((body, ctx._replace(writes_file=ctx.writes_file or holder.writes_file)))

    def command(self, node: Node | None, redirects: list[Node], ctx: _Ctx) -> None:
        index = len(self.commands)
        first = node if node is not None else redirects[0]
        cmd = Command([], [], first.start_byte, first.end_byte, writes_file=ctx.writes_file, piped_in=ctx.piped_in,
                      piped_out=ctx.piped_out, captured_in=ctx.captured_in)
        self.commands.append(cmd)
        later: list[tuple[Node, _Ctx]] = []
        tail: list[Node] = []
        at, named = cmd.start, False
        for part in (node.children if node is not None else []) + redirects:
            if part.type in _REDIRECTS:
                tail += self.redirection(part, cmd, index, ctx, later)
            elif not self.command_part(part, cmd, index, ctx, later, at, named):
                continue
            named = named or part.type == "command_name"
            at = max([at, *(w.end for w in cmd.words[-1:]), _line_end(part)])
        cmd.end = max(cmd.end, at)
        self.follow(tail, cmd, ctx)
        self.stack.extend(reversed(later))

    def command_part(self, part: Node, cmd: Command, index: int, ctx: _Ctx, later: list[tuple[Node, _Ctx]],
                     at: int, named: bool) -> bool:
        """One part of a simple command other than a redirection (`named`: its name was seen): an assignment
        before the name, the name, a comment or an argument; False for an empty token, which is no part."""
        kind = part.type
        if kind == "variable_assignment" and not named:
            cmd.assignments.append(_word(part, self.data, at))
            later += [(c, ctx._replace(target=EXPOSED_CONTEXT)) for c in part.children]
        elif kind == "command_name":
            inner = part.named_children[0] if part.named_child_count == 1 else part
            cmd.words.append(_word(inner, self.data, at))
            later.append((inner, ctx._replace(target=index)))
        elif kind == "comment":
            self.region(part, "comment")
        elif part.is_named:
            cmd.words.append(_word(part, self.data, at))
            later += [(c, ctx._replace(target=index)) for c in _inside(part)]
        elif part.end_byte > part.start_byte:  # a bare token the grammar leaves unnamed (a lone `$`)
            word = _word(part, self.data, at)
            cmd.words.append(Word(word.value, word.raw, word.start, word.end, "$" in word.raw, False, word.gap))
        else:
            return False
        return True

    def follow(self, tail: list[Node], cmd: Command, ctx: _Ctx) -> None:
        """What the grammar hung on a heredoc's delimiter line: `| next` (a pipeline) or `&& next` (the chain)."""
        if not tail:
            return
        if tail[0].type in _PIPE_TOKENS:
            cmd.piped_out = True
            self.pipeline(tail[1:], ctx._replace(piped_in=True))
        else:
            self.push(tail[1:], ctx)

    def redirection(self, node: Node, cmd: Command, index: int, ctx: _Ctx,
                    later: list[tuple[Node, _Ctx]]) -> list[Node]:
        """Read one redirection of `cmd`: its target (a region), the words bash gives the command after it,
        a heredoc's body or a herestring. Returns the pipeline or chain hung on a heredoc, if any."""
        kind = node.type
        if kind == "heredoc_redirect":
            return self.heredoc(node, cmd, index, ctx, later)
        op, target = self.redirect_parts(node, cmd, index, ctx, later)
        if kind == "herestring_redirect":
            if target is not None:
                cmd.herestrings.append(_word(target, self.data, target.start_byte))
            return []
        if ">" in op and target is not None and _writes_to_file(op, _value(target, self.data)):
            cmd.writes_file = True
        return []

    def redirect_parts(self, node: Node, cmd: Command, index: int, ctx: _Ctx,
                       later: list[tuple[Node, _Ctx]]) -> tuple[str, Node | None]:
        """The operator and target of a file redirection or herestring; the words after the target go to
        `cmd`, the target's expansions to `later`."""
        op, target, at = "", None, node.start_byte
        for child in node.children:
            if child.type == "ERROR" or child.is_missing:
                later.append((child, ctx))
            elif not child.is_named:
                op = op or child.type
            elif child.type in ("file_descriptor", "comment"):
                continue
            elif target is None:
                target = child
                if node.type != "herestring_redirect":  # a file name; a herestring is data for the command
                    self.region(child, "inert")
                later.append((child, ctx._replace(target=EXPOSED_CONTEXT)))
                at = child.end_byte
            else:
                at = self.add_word(cmd, child, at, index, ctx, later)
        return op, target

    def heredoc(self, node: Node, cmd: Command, index: int, ctx: _Ctx, later: list[tuple[Node, _Ctx]]) -> list[Node]:
        """Read `<<EOF ... EOF`: its body, and what the grammar hangs on it from the delimiter's line
        (the command's further words and redirections; a `|` pipeline or a `&&` chain that follows)."""
        literal, at = False, node.start_byte
        tail: list[Node] = []
        body: Node | None = None
        for child in node.children:
            kind = child.type
            if kind == "heredoc_start":
                literal = _quoted_delimiter(child, self.data)
                self.region(child, "inert", start=node.start_byte)
                at = child.end_byte
            elif kind == "heredoc_body":
                body = child
            elif kind == "heredoc_end":
                self.region(child, "inert")
            elif kind in ("<<", "<<-"):
                continue
            elif (hung := _hung_on_heredoc(child, bool(tail))) is not None:
                tail += hung
            elif kind in _REDIRECTS:
                self.redirection(child, cmd, index, ctx, later)
                at = child.end_byte
            elif _not_a_word(child):
                later.append((child, ctx))
            else:
                at = self.add_word(cmd, child, at, index, ctx, later)
        if body is not None:
            self.heredoc_body(body, cmd, literal, ctx, later)
        return tail

    def heredoc_body(self, body: Node, cmd: Command, literal: bool, ctx: _Ctx, later: list[tuple[Node, _Ctx]]) -> None:
        """A heredoc's text (without the terminator's indent of a `<<-` body); an unquoted delimiter leaves
        its `$(...)` to run when bash expands it."""
        raw = self.data[body.start_byte : body.end_byte]
        cut = raw.rfind(b"\n")  # a `<<-` body ends with the terminator's indent
        end = body.start_byte + (cut + 1 if cut >= 0 else 0)
        cmd.heredocs.append(Heredoc(decode(self.data[body.start_byte : end]), body.start_byte, end, literal))
        if not literal:
            later.append((body, ctx._replace(target=EXPOSED_CONTEXT)))

    def add_word(self, cmd: Command, child: Node, at: int, index: int, ctx: _Ctx,
                 later: list[tuple[Node, _Ctx]]) -> int:
        """One more word of command `index` (its expansions walked later); returns where the word ends."""
        cmd.words.append(_word(child, self.data, at))
        later.append((child, ctx._replace(target=index)))
        return child.end_byte


def _inside(node: Node) -> list[Node]:
    """What to walk into for a word: an assignment's parts (walking the assignment would make it a command)."""
    return node.children if node.type == "variable_assignment" else [node]


def _line_end(node: Node) -> int:
    """Where a part of a command ends on its line (a heredoc's body and terminator come later)."""
    if node.type != "heredoc_redirect":
        return node.end_byte
    end = node.start_byte
    for child in node.children:
        if child.type in ("heredoc_body", "heredoc_end") or child.type in _CHAIN_TOKENS \
                or child.type in _PIPE_TOKENS or (child.type == "pipeline" and child.child_count
                                                 and child.children[0].type in _PIPE_TOKENS):
            break
        end = child.end_byte
    return end


def _problems(root: Node, data: bytes) -> list[SyntaxProblem]:
    """Every ERROR and MISSING node, with its line and column (descending only where `has_error`)."""
    out: list[SyntaxProblem] = []
    stack = [root] if root.has_error else []
    while stack:
        node = stack.pop()
        if node.is_missing or node.type == "ERROR":
            raw = data[node.start_byte : node.end_byte]
            start = node.start_byte + len(raw) - len(raw.lstrip())  # an ERROR may start with the blank before it
            row = data.count(b"\n", 0, start)
            line_start = data.rfind(b"\n", 0, start) + 1
            col = len(decode(data[line_start:start])) + 1
            what = f"missing `{node.type}`" if node.is_missing else \
                f"unexpected `{_shown(decode(raw))}`" if raw.strip() else "unexpected end"
            out.append(SyntaxProblem(start, node.end_byte, f"{what} at line {row + 1}, column {col}"))
        stack.extend(c for c in node.children if c.has_error or c.is_missing)
    return sorted(out, key=lambda p: (p.start, p.end))


def _shown(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 40 else text[:37] + "..."


# ----------------------------------------------------------------------------------- the chain


def _segments(root: Node) -> list[Segment]:
    """The commands of the top-level chain; subshells, groups, `if`, loops and functions stay whole."""
    out: list[Segment] = []
    stack = list(reversed(root.children))
    while stack:
        node = stack.pop()
        kind = node.type
        if not node.is_named or kind == "comment":
            continue
        if kind in ("list", "ERROR"):
            stack.extend(reversed(node.children))
            continue
        doc = _heredoc_of(node)
        tail = _heredoc_chain(doc) if doc is not None else []
        if node.end_byte == node.start_byte:
            continue  # a MISSING command (`a && `): nothing to run
        if not tail or doc is None:
            out.append(Segment(node.start_byte, node.end_byte, ((node.start_byte, node.end_byte),)))
            continue
        out.append(_heredoc_segment(node, doc))
        stack.extend(reversed(tail[1:]))
    return out


def _heredoc_of(node: Node) -> Node | None:
    """The heredoc redirection of a redirected statement, if any."""
    if node.type != "redirected_statement":
        return None
    return next((c for c in node.children if c.type == "heredoc_redirect"), None)


def _heredoc_segment(node: Node, doc: Node) -> Segment:
    """A command with a heredoc that has a chain hung on it: the command up to its delimiter's line, and
    the heredoc's body and terminator."""
    end = _line_end(doc)
    body = [(c.start_byte, c.end_byte) for c in doc.children if c.type in ("heredoc_body", "heredoc_end")]
    owns = ((node.start_byte, end), (body[0][0], body[-1][1])) if body else ((node.start_byte, end),)
    return Segment(node.start_byte, end, owns)


def _heredoc_chain(doc: Node) -> list[Node]:
    """The chain the grammar hangs on a heredoc (`<<EOF && next`): its operator, then the statements."""
    for k, child in enumerate(doc.children):
        if child.type in _CHAIN_TOKENS:
            return [c for c in doc.children[k:] if c.type not in ("heredoc_body", "heredoc_end")]
    return []


# ----------------------------------------------------------------------------------- entry point


@lru_cache(maxsize=256)
def parse(text: str) -> Script:
    """Every simple command in `text`, at any depth (subshells, `$(...)`, functions, `if`, `case`, loops),
    the regions that are no command, what tree-sitter could not read, and the top-level chain."""
    data = encode(text)
    tree = _parser().parse(_ascii_shape(data))
    root = tree.root_node
    walk = _Walk(data)
    walk.run(root)
    return Script(data, tuple(walk.commands), tuple(walk.regions), tuple(_problems(root, data)),
                  tuple(_segments(root)),
                  tuple((c.start_byte, c.end_byte) for c in root.children if c.is_named))
