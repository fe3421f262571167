"""Read and rewrite a blueprint's launch command without retyping it.

The launch command is one shell string (`cd /repo && source .venv/bin/activate && python -m
ajet.launcher --conf x.yaml --autokill`). The runner has to point `--conf` at its patched
YAML copy, strip `--autokill`, add `--skip-check-avail-gpu`, or put `proxychains4 -q` in
front of the launcher. Each edit splices the original text, so everything the person wrote
outside the edited words stays byte-identical (their quoting, spacing, `&&` chains).

A small shell lexer (quotes, escapes, `$(...)`, operators) gives every word its span in the
string; `shlex` alone cannot, because it forgets where words were. Nothing here raises on
odd input: an unterminated quote just runs to the end of the string.

Limits, on purpose: commands hidden inside `bash -c "..."` or a script are not looked into,
and `remove_flag` treats flags as booleans unless told that the flag takes a value.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass

__all__ = [
    "add_flag",
    "conf_path",
    "has_flag",
    "launcher_segment",
    "prefix_launcher",
    "remove_flag",
    "replace_conf",
    "split_chain",
]

_OPERATORS = ("&&", "||", ";;", "|&", ">>", "<<", "&>", ">&", "<&", ">|", "&", "|", ";", "<", ">", "(", ")")
_OP_CHARS = frozenset("&|;<>()")
_CHAIN_OPS = frozenset({"&&", "||", ";", ";;", "&", "\n"})
_PIPE_OPS = frozenset({"|", "|&"})
_REDIRECT_CHARS = frozenset("<>")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
# Programs that run another program: the launcher may sit behind them.
_WRAPPERS = frozenset(
    {"env", "nohup", "time", "exec", "command", "nice", "setsid", "stdbuf", "timeout", "proxychains",
     "proxychains4", "taskset", "ionice", "numactl", "xvfb-run", "uv", "srun"}
)
# Wrapper options that consume the next word.
_WRAPPER_VALUE_OPTS = {
    "env": {"-u", "--unset", "-C", "--chdir"},
    "nice": {"-n", "--adjustment"},
    "proxychains": {"-f"},
    "proxychains4": {"-f"},
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "stdbuf": {"-i", "-o", "-e"},
    "ionice": {"-c", "-n", "-p"},
    "uv": {"--with", "--python", "-p", "--project", "--directory"},
}
_PROXYCHAINS = frozenset({"proxychains", "proxychains4"})


@dataclass(frozen=True)
class _Token:
    kind: str  # "word" or "op"
    text: str  # the raw text (for words) or the operator
    value: str  # a word with its quotes and escapes removed
    start: int
    end: int


@dataclass(frozen=True)
class _Segment:
    start: int
    end: int
    tokens: tuple[_Token, ...]


def _skip_subst(cmd: str, i: int) -> int:
    """Index after a `$(...)` starting at `i` (pointing at `$`); runs to the end if unclosed."""
    depth = 0
    n = len(cmd)
    while i < n:
        c = cmd[i]
        if c == "\\":
            i += 2
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def _lex_word(cmd: str, i: int) -> tuple[int, str]:
    """Lex one word from `i`; returns (end index, unquoted value)."""
    n = len(cmd)
    out: list[str] = []
    while i < n:
        c = cmd[i]
        if c in " \t\n" or c in _OP_CHARS:
            break
        if c == "\\":
            if i + 1 < n and cmd[i + 1] == "\n":  # line continuation
                i += 2
                continue
            out.append(cmd[i + 1 : i + 2])
            i += 2
        elif c == "'":
            j = cmd.find("'", i + 1)
            j = n if j < 0 else j
            out.append(cmd[i + 1 : j])
            i = j + 1
        elif c == '"':
            i += 1
            while i < n and cmd[i] != '"':
                if cmd[i] == "\\" and i + 1 < n and cmd[i + 1] in '$`"\\\n':
                    if cmd[i + 1] != "\n":
                        out.append(cmd[i + 1])
                    i += 2
                    continue
                out.append(cmd[i])
                i += 1
            i += 1
        elif c == "$" and cmd.startswith("$(", i):
            j = _skip_subst(cmd, i + 1)
            out.append(cmd[i:j])
            i = j
        elif c == "`":
            j = cmd.find("`", i + 1)
            j = n if j < 0 else j + 1
            out.append(cmd[i:j])
            i = j
        else:
            out.append(c)
            i += 1
    return min(i, n), "".join(out)


def _lex_op(cmd: str, i: int) -> int:
    for op in _OPERATORS:
        if cmd.startswith(op, i):
            return i + len(op)
    return i + 1


def _tokenize(cmd: str) -> list[_Token]:
    tokens: list[_Token] = []
    i, n = 0, len(cmd)
    while i < n:
        c = cmd[i]
        if c in " \t\r":
            i += 1
        elif c == "\\" and cmd.startswith("\\\n", i):
            i += 2
        elif c == "\n":
            tokens.append(_Token("op", "\n", "\n", i, i + 1))
            i += 1
        elif c == "#":
            j = cmd.find("\n", i)
            i = n if j < 0 else j
        elif c in _OP_CHARS:
            j = _lex_op(cmd, i)
            tokens.append(_Token("op", cmd[i:j], cmd[i:j], i, j))
            i = j
        else:
            j, value = _lex_word(cmd, i)
            raw = cmd[i:j]
            if raw.isdigit() and j < n and cmd[j] in _REDIRECT_CHARS:  # io number: `2>&1`
                k = _lex_op(cmd, j)
                tokens.append(_Token("op", cmd[i:k], cmd[i:k], i, k))
                i = k
                continue
            tokens.append(_Token("word", raw, value, i, j))
            i = j
    return tokens


def _segments(cmd: str) -> list[_Segment]:
    """The non-empty commands of an `&&` / `||` / `;` chain (subshell parentheses kept whole)."""
    segments: list[_Segment] = []
    current: list[_Token] = []
    depth = 0

    def close() -> None:
        if any(t.kind == "word" for t in current):
            segments.append(_Segment(current[0].start, current[-1].end, tuple(current)))
        current.clear()

    for tok in _tokenize(cmd):
        if tok.kind == "op" and tok.text == "(":
            depth += 1
        elif tok.kind == "op" and tok.text == ")":
            depth = max(0, depth - 1)
        if tok.kind == "op" and tok.text in _CHAIN_OPS and depth == 0:
            close()
            continue
        current.append(tok)
    close()
    return segments


def _command_words(seg: _Segment) -> list[_Token]:
    """Words of the segment's first pipeline element, without redirections and their targets."""
    words: list[_Token] = []
    skip_next = False
    for tok in seg.tokens:
        if tok.kind == "op":
            if tok.text in _PIPE_OPS:
                break
            skip_next = any(ch in _REDIRECT_CHARS for ch in tok.text)
            continue
        if skip_next:
            skip_next = False
            continue
        words.append(tok)
    return words


def _first_non_assignment(words: list[_Token]) -> int:
    i = 0
    while i < len(words) and _ASSIGNMENT.match(words[i].text):
        i += 1
    return i


def _program_index(words: list[_Token]) -> int:
    """Index of the real program: after assignments and wrappers such as `env` or `proxychains4 -q`."""
    i = _first_non_assignment(words)
    while i < len(words):
        name = os.path.basename(words[i].value)
        if name not in _WRAPPERS:
            return i
        value_opts = _WRAPPER_VALUE_OPTS.get(name, set())
        i += 1
        if name == "uv" and i < len(words) and words[i].value == "run":
            i += 1
        while i < len(words):
            word = words[i].value
            if word in value_opts:
                i += 2
            elif word.startswith("-") or (name == "env" and _ASSIGNMENT.match(word)):
                i += 1
            else:
                break
        if name == "timeout" and i < len(words):
            i += 1  # the duration
        if name == "nice" and i < len(words) and words[i].value.lstrip("-").isdigit():
            i += 1
    return len(words)


def _is_launcher(words: list[_Token]) -> bool:
    p = _program_index(words)
    if p >= len(words):
        return False
    program = os.path.basename(words[p].value)
    if program in ("ajet", "ajet-launcher"):
        return True
    if not program.startswith("python"):
        return False
    args = [w.value for w in words[p + 1 :]]
    for k, arg in enumerate(args):
        if arg == "-m":
            return k + 1 < len(args) and args[k + 1] == "ajet.launcher"
        if arg.startswith("-m"):
            return arg[2:] == "ajet.launcher"
        if not arg.startswith("-"):
            return arg.replace("\\", "/").endswith("ajet/launcher.py")
    return False


def _launcher_index(segments: list[_Segment]) -> int | None:
    for k, seg in enumerate(segments):
        if _is_launcher(_command_words(seg)):
            return k
    return None


def _target(cmd: str) -> _Segment | None:
    """The segment edits apply to: the launcher's, else the last command of the chain."""
    segments = _segments(cmd)
    if not segments:
        return None
    k = _launcher_index(segments)
    return segments[k] if k is not None else segments[-1]


def split_chain(cmd: str) -> list[str]:
    """The commands of a chain split on unquoted `&&`, `||`, `;`, `&` and newlines."""
    return [cmd[s.start : s.end] for s in _segments(cmd)]


def launcher_segment(cmd: str) -> int | None:
    """Index (in `split_chain(cmd)`) of the command that runs the AgentJet launcher."""
    return _launcher_index(_segments(cmd))


def _conf_token(words: list[_Token]) -> tuple[_Token, _Token | None] | None:
    """The `--conf` word and, for `--conf X`, the word holding X."""
    for k, word in enumerate(words):
        if word.value == "--conf":
            return word, words[k + 1] if k + 1 < len(words) else None
        if word.value.startswith("--conf="):
            return word, None
    return None


def conf_path(cmd: str) -> str | None:
    """The YAML passed as `--conf X` or `--conf=X`, unquoted; None when there is none."""
    seg = _target(cmd)
    if seg is None:
        return None
    found = _conf_token(_command_words(seg))
    if found is None:
        return None
    flag, value = found
    if value is not None:
        return value.value
    if flag.value.startswith("--conf="):
        return flag.value[len("--conf=") :]
    return None


def _splice(cmd: str, start: int, end: int, text: str) -> str:
    return cmd[:start] + text + cmd[end:]


def replace_conf(cmd: str, new: str) -> str:
    """Point `--conf` at `new` (keeping the `--conf X` / `--conf=X` form); add it when absent."""
    seg = _target(cmd)
    if seg is None:
        return cmd
    words = _command_words(seg)
    found = _conf_token(words)
    quoted = shlex.quote(new)
    if found is None:
        return _splice(cmd, words[-1].end, words[-1].end, f" --conf {quoted}") if words else cmd
    flag, value = found
    if value is not None:
        return _splice(cmd, value.start, value.end, quoted)
    if flag.value.startswith("--conf="):
        return _splice(cmd, flag.start, flag.end, f"--conf={quoted}")
    return _splice(cmd, flag.end, flag.end, f" {quoted}")


def _flag_hits(words: list[_Token], flag: str) -> list[int]:
    return [k for k, w in enumerate(words) if w.value == flag or w.value.startswith(flag + "=")]


def has_flag(cmd: str, flag: str) -> bool:
    """Whether the launcher command carries `flag` (alone or as `flag=value`)."""
    seg = _target(cmd)
    name = flag.split()[0] if flag.split() else ""
    if seg is None or not name:
        return False
    return bool(_flag_hits(_command_words(seg), name))


def remove_flag(cmd: str, flag: str, *, takes_value: bool = False) -> str:
    """Drop every `flag` (and its value word when `takes_value`) from the launcher command."""
    seg = _target(cmd)
    if seg is None or not flag:
        return cmd
    words = _command_words(seg)
    spans: list[tuple[int, int]] = []
    for k in _flag_hits(words, flag):
        last = k + 1 if takes_value and words[k].value == flag and k + 1 < len(words) else k
        before = seg.tokens[0].start
        for tok in seg.tokens:
            if tok.end <= words[k].start:
                before = tok.end
        spans.append((before, words[last].end))
    for start, end in reversed(spans):
        cmd = _splice(cmd, start, end, "")
    return cmd


def add_flag(cmd: str, flag: str) -> str:
    """Append `flag` to the launcher command (before any redirection or pipe); idempotent."""
    seg = _target(cmd)
    if seg is None or not flag.strip() or has_flag(cmd, flag):
        return cmd
    words = _command_words(seg)
    if not words:
        return cmd
    return _splice(cmd, words[-1].end, words[-1].end, f" {flag.strip()}")


def prefix_launcher(cmd: str, prefix: str) -> str:
    """Run the launcher behind `prefix` (e.g. `proxychains4 -q`), after `VAR=val` words; idempotent."""
    seg = _target(cmd)
    prefix = prefix.strip()
    if seg is None or not prefix:
        return cmd
    try:
        prefix_words = shlex.split(prefix)
    except ValueError:
        prefix_words = prefix.split()
    if not prefix_words:
        return cmd
    words = _command_words(seg)
    at = _first_non_assignment(words)
    if at >= len(words):
        return cmd
    head = os.path.basename(prefix_words[0])
    same = _PROXYCHAINS if head in _PROXYCHAINS else {head}
    before_program = words[at : _program_index(words)]
    if any(os.path.basename(w.value) in same for w in before_program):
        return cmd
    return _splice(cmd, words[at].start, words[at].start, prefix + " ")
