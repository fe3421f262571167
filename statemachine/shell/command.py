"""Read and rewrite a blueprint's launch command: every AgentJet launcher call in it, or a refusal.

The runner has to point `--conf` at its patched YAML copy, strip `--autokill` / `--kill`
(they kill every python, ray and vllm process on the host), add `--skip-check-avail-gpu`,
or put `proxychains4 -q` in front of the launcher. It does that for EVERY launcher call in
the command: after `&&` / `;` / newlines, in subshells, `$(...)`, functions, `if` / `case` / loops,
in `bash -c` / `sh -c` strings (any quoting, any depth), `eval`, and heredocs or herestrings fed to
a shell.

The structure comes from one parser, tree-sitter-bash (`ajet_runner.statemachine.shell.syntax`); there is no
second lexer. Each edit splices a byte range of the original text, so everything outside the edited
words stays byte-identical; a rewritten `bash -c` string is re-quoted as a whole. `--autokill` is
recognised however argparse would accept it: any unique prefix (`--a`, `--auto`, `--autok`),
`--autokill=...`, assembled from quotes (`-""-autokill`).

Anything the runner cannot read with certainty is refused with the reason
(`analyze_command(...).refusals`), never guessed: a launcher argument only known at run time
(`$EXTRA`, `"$@"`, `$((...))`, globs), a command piped into a shell, a launcher started some other
way (`python -c ...`, `xargs`), `--autokill` / a launcher call written into a file or a variable,
text the parser cannot read (ERROR / MISSING nodes) at or before a statement that mentions the
launcher. A script file the command runs (`bash train.sh`) is never rewritten: that is a note, and the
preflight reads the script to say where the launcher is (statemachine/shell/script_launcher.py).
docs/launch-command.md has the whole list.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import PurePath
from typing import Any, NamedTuple

from ajet_runner.statemachine.shell.syntax import (
    INERT_CONTEXT,
    Command,
    Script,
    Word,
    decode,
    encode,
    parse,
)

__all__ = [
    "HAZARD_FLAGS",
    "INERT_PROGRAMS",
    "SHELLS",
    "LAUNCHER_VALUE_OPTIONS",
    "LAUNCH_COMMAND_MAX_CHARS",
    "CommandAnalysis",
    "LauncherCall",
    "add_flag",
    "analyze_command",
    "conf_path",
    "conf_paths",
    "has_flag",
    "has_launcher",
    "hazard_of",
    "launcher_segment",
    "point_command_at",
    "prefix_command_at",
    "prefix_launcher",
    "Program",
    "programs",
    "remove_flag",
    "remove_hazards",
    "replace_conf",
    "split_chain",
]

LAUNCH_COMMAND_MAX_CHARS = 10_000
"""Longer launch commands are refused unread (a real one is well under 1 KB): bounds analysis time."""

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


def _past_wrapper(words: Sequence[Any], i: int, name: str, value_opts: set[str]) -> int:
    """Index after wrapper `words[i]` (named `name`) and its own options: where the wrapped program starts."""
    i += 1
    if name == "uv" and i < len(words) and words[i].value == "run":
        i += 1
    i = _past_options(words, i, name, value_opts)
    if name == "timeout" and i < len(words):
        i += 1  # the duration
    if name == "nice" and i < len(words) and words[i].value.lstrip("-").isdigit():
        i += 1
    return i


def _past_options(words: Sequence[Any], i: int, name: str, value_opts: set[str]) -> int:
    """Index after a wrapper's options from `i` (those in `value_opts` take a value; `env` also takes
    assignments)."""
    while i < len(words):
        word = words[i].value
        if word in value_opts:
            i += 2
        elif word.startswith("-") or (name == "env" and _ASSIGNMENT.match(word)):
            i += 1
        else:
            break
    return i


# ------------------------------------------------------------------ launcher calls, by the parser

_SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "rbash"})
# Programs that only print, test or move around: text in their arguments never reaches a launcher
# (unless their output is written into a file).
_INERT = frozenset({
    "echo", "printf", "true", "false", ":", "cd", "pushd", "popd", "pwd", "ls", "cat", "head", "tail", "wc",
    "grep", "test", "[", "sleep", "date", "mkdir", "touch", "nvidia-smi", "which", "type", "hostname", "wait",
    "tee", "unset", "ulimit", "umask", "df", "du", "free", "env_info",
})
SHELLS, INERT_PROGRAMS = _SHELLS, _INERT  # for the script reader (statemachine/shell/script_launcher.py)
_MORE_WRAPPERS = {"sudo": {"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U"}, "xargs": {
    "-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter", "--max-args", "--max-procs"}}
_ALL_WRAPPERS = _WRAPPERS | frozenset(_MORE_WRAPPERS)
_PYTHON_VALUE_OPTS = frozenset({"-X", "-W", "-Q"})
# The real launcher's options (modelscope/AgentJet ajet/launcher.py and ajet/cli/launcher.py).
LAUNCHER_VALUE_OPTIONS = ("--backbone", "--conf", "--exp-dir", "--debug", "--db", "--bp", "--breakpoint", "--kill",
                          "--prefix", "--swarm-overwatch")
HAZARD_FLAGS = ("--autokill", "--kill")
HAZARD_TEXT = re.compile(r"(?<![\w-])--(?:a(?:u(?:t(?:o(?:k(?:i(?:l(?:l)?)?)?)?)?)?)?|k(?:i(?:l(?:l)?)?)?)(?![\w-])")
LAUNCHER_TEXT = re.compile(r"ajet\.launcher|ajet/launcher\.py|ajet-launcher")
# The same, on the UTF-8 bytes the parser's positions count.
_HAZARD_BYTES = re.compile(HAZARD_TEXT.pattern.encode())
_LAUNCHER_BYTES = re.compile(LAUNCHER_TEXT.pattern.encode())
_MAX_DEPTH = 4


def hazard_of(arg: str) -> str | None:
    """`--autokill` or `--kill` when argparse would read `arg` as one of them (any unique prefix, `=value`)."""
    name = arg.split("=", 1)[0]
    if not name.startswith("--") or len(name) < 3:
        return None
    return next((flag for flag in HAZARD_FLAGS if flag.startswith(name)), None)


def _value_option(arg: str) -> str | None:
    """The launcher option taking a value that `arg` names (exactly or as argparse's unique prefix)."""
    name = arg.split("=", 1)[0]
    if not name.startswith("--") or len(name) < 3:
        return None
    if name in LAUNCHER_VALUE_OPTIONS:
        return name
    hits = [o for o in LAUNCHER_VALUE_OPTIONS if o.startswith(name)]
    return hits[0] if len(hits) == 1 and hazard_of(arg) is None else None


@dataclass(frozen=True)
class LauncherCall:
    """One call of the AgentJet launcher, as found in the command."""

    text: str  # the call as written
    where: str  # "" at the top level, else e.g. "in a `bash -c` string"
    args: tuple[str, ...]  # its arguments, unquoted
    conf: str | None  # the --conf value, unquoted
    conf_expanded: bool  # the --conf value is only known at run time (`$CONF`, `${CONF:-x y.yaml}`)
    hazards: tuple[str, ...]  # --autokill / --kill spellings it carries, as written


@dataclass
class CommandAnalysis:
    """Every launcher call, what makes the command unreadable (refusals) and what is worth a note."""

    calls: list[LauncherCall] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class _Call:
    cmd: Command
    prog: int  # index of the first word that is not an assignment or a wrapper
    first_arg: int  # index of the launcher's first argument
    wrappers: list[str]

    @property
    def args(self) -> list[Word]:
        return self.cmd.words[self.first_arg :]


@dataclass
class _Nested:
    """Shell text inside the command (a `bash -c` string, a heredoc or herestring fed to a shell, `eval`)."""

    start: int  # byte span in the outer text
    end: int
    inner: str
    what: str
    raw_splice: bool  # a heredoc body is spliced as is; a string is re-quoted


@dataclass
class _Scan:
    script: Script
    calls: list[_Call] = field(default_factory=list)
    nested: list[_Nested] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _resolve(words: list[Word]) -> tuple[int, list[str]]:
    """Index of the real program behind wrappers (`env A=1`, `nohup`, `proxychains4 -q`, `sudo -u x`)."""
    i, wrappers = 0, list[str]()
    while i < len(words):
        name = os.path.basename(words[i].value)
        if name not in _ALL_WRAPPERS:
            return i, wrappers
        wrappers.append(name)
        value_opts = _WRAPPER_VALUE_OPTS.get(name, set()) | _MORE_WRAPPERS.get(name, set())
        i = _past_wrapper(words, i, name, value_opts)
    return len(words), wrappers


def _launcher_args_at(words: list[Word], p: int) -> int | None:
    """Index of the launcher's first argument when `words[p]` starts the launcher, else None."""
    if p >= len(words):
        return None
    program = os.path.basename(words[p].value)
    if program in ("ajet", "ajet-launcher"):
        return p + 1
    if not (program.startswith("python") or words[p].expanded):
        return None
    return _python_launcher_args(words, p + 1)


def _python_launcher_args(words: list[Word], k: int) -> int | None:
    """Index of the launcher's first argument when python's arguments from `k` run it (`-m ajet.launcher`
    or a path ending in ajet/launcher.py, past python's own options), else None."""
    while k < len(words):
        arg = words[k].value
        if arg.startswith("-m"):
            return _after_module(words, k)
        if arg in _PYTHON_VALUE_OPTS:
            k += 2
            continue
        if arg == "-c":
            return None
        if not arg.startswith("-"):
            return k + 1 if arg.replace("\\", "/").endswith("ajet/launcher.py") else None
        k += 1
    return None


def _after_module(words: list[Word], k: int) -> int | None:
    """Index after `-m ajet.launcher` (or `-majet.launcher`) at `words[k]`; None for another module."""
    if words[k].value == "-m":
        return k + 2 if k + 1 < len(words) and words[k + 1].value == "ajet.launcher" else None
    return k + 1 if words[k].value[2:] == "ajet.launcher" else None


def _shell_c_string(words: list[Word], p: int) -> tuple[int | None, bool]:
    """(index of the `-c` string or of the script, whether it is a `-c` string) for a shell at `words[p]`."""
    k, has_c = p + 1, False
    while k < len(words):
        arg = words[k].value
        if arg in ("-o", "+o", "-O", "+O"):
            k += 2
            continue
        if arg == "--":
            k += 1
            break
        if arg.startswith(("-", "+")) and len(arg) > 1:
            has_c = has_c or (arg[0] == "-" and not arg.startswith("--") and "c" in arg[1:])
            k += 1
            continue
        break
    return (k if k < len(words) else None), has_c


def _uncertain_args(call: _Call) -> list[str]:
    """Launcher arguments whose value bash decides only at run time (they could hold --autokill)."""
    reasons, words, i = [], call.args, 0
    while i < len(words):
        w = words[i]
        option = _value_option(w.value) if w.value.startswith("--") else None
        if option is not None and "=" not in w.value:  # `--option VALUE`
            reason = _split_value(option, words[i + 1]) if i + 1 < len(words) else ""
            i += 2
        else:
            reason = _expanded_arg(w, option) if w.expanded else ""
            i += 1
        if reason:
            reasons.append(reason)
    return reasons


def _split_value(option: str, value: Word) -> str:
    """Why the separate value of `option` is only known at run time ("" when it is known, or is --conf's)."""
    if value.expanded and not value.quoted_whole and option != "--conf":
        return f"the value of {option} (`{value.raw}`) is split into words at run time"
    return ""


def _expanded_arg(w: Word, option: str | None) -> str:
    """Why an argument bash expands (`option`: the value option it spells as `--option=VALUE`) is only known
    at run time ("" for a whole double-quoted value, or --conf's)."""
    if option is None:
        return (f"the launcher argument `{w.raw}` is only known at run time "
                "(it could hold --autokill); write the arguments out")
    after = w.raw.split("=", 1)[1] if "=" in w.raw else ""
    whole = len(after) >= 2 and after[0] == after[-1] == '"' and after.count('"') == 2
    if option != "--conf" and not whole:
        return f"the value of {option} in `{w.raw}` is split into words at run time"
    return ""


def _mentions(text: str) -> bool:
    return bool(HAZARD_TEXT.search(text) or LAUNCHER_TEXT.search(text))




def _is_inert(name: str, cmd: Command, inert: list[bool]) -> bool:
    """A program that only prints, tests or moves around, whose output reaches no file and no other
    program's arguments (`$(echo x)` in an assignment or a launcher argument is not inert)."""
    if name not in _INERT or cmd.writes_file:
        return False
    where = cmd.captured_in
    return where is None or where == INERT_CONTEXT or (where >= 0 and inert[where])


def _unreadable(script: Script, scan: _Scan) -> bool:
    """Refuse when what tree-sitter could not read (ERROR / MISSING) comes before the end of the line of
    the last statement that mentions the launcher or --autokill (or of a launcher call): bash reads a
    script line by line and stops at a syntax error, so a later line cannot change what ran, but an
    error before it or on it can. True when refused (then no call is reported or rewritten)."""
    if not script.problems:
        return False
    first = script.problems[0]
    data = script.data
    hits = [m.end() for rx in (_HAZARD_BYTES, _LAUNCHER_BYTES) for m in rx.finditer(data)]
    hits += [c.cmd.end for c in scan.calls]
    if not hits:
        scan.notes.append(f"the bash parser cannot read it ({first.message}); it runs as written")
        return False
    last = max(hits)
    last = max([last, *(e for s, e in script.statements if s < last <= e)])
    line_end = data.find(b"\n", last)  # bash reads a line whole: an error later on it stops the line too
    if first.start <= (len(data) if line_end < 0 else line_end):
        scan.refusals.append(f"the bash parser cannot read it ({first.message}), and it mentions the launcher or "
                             "--autokill there or after; write it as plain commands")
        scan.calls.clear()
        scan.nested.clear()
        return True
    scan.notes.append(f"the bash parser cannot read what follows the launcher ({first.message}); bash stops "
                      "there with a syntax error")
    return False


def _fed(cmd: Command) -> list[tuple[int, int, str, bool, bool]]:
    """The heredocs and herestrings fed to a command: span, text, literal (read as is), raw (a heredoc)."""
    fed = [(d.start, d.end, d.body, d.literal or not re.search(r"[$`\\]", d.body), True) for d in cmd.heredocs]
    return fed + [(w.start, w.end, w.value, not w.expanded, False) for w in cmd.herestrings]


class _Scanner:
    """One pass over a script's simple commands: launcher calls, nested shell text, and each word's kind."""

    def __init__(self, script: Script, depth: int) -> None:
        self.script = script
        self.depth = depth
        self.scan = _Scan(script)
        # (start, end, kind, value): launcher | nested | inert | exposed | container | comment
        self.spans: list[tuple[int, int, str, str | None]] = [(r.start, r.end, r.kind, None) for r in script.regions]
        self.inert: list[bool] = []

    def nest(self, start: int, end: int, inner: str, what: str, raw: bool) -> None:
        """Shell text to read one level down (or a refusal when too deep and it mentions the launcher)."""
        if self.depth >= _MAX_DEPTH:
            if _mentions(inner):
                self.scan.refusals.append(f"{what} is nested more than {_MAX_DEPTH} shells deep")
            return
        self.scan.nested.append(_Nested(start, end, inner, what, raw))
        self.spans.append((start, end, "nested", None))

    def command(self, cmd: Command) -> None:
        """Read one simple command: what its program is, and the kind of each of its words and fed texts."""
        words = cmd.words
        self.spans += [(a.start, a.end, "exposed", a.value) for a in cmd.assignments]
        p, wrappers = _resolve(words)
        first_arg = _launcher_args_at(words, p)
        name = os.path.basename(words[p].value) if p < len(words) else ""
        self.inert.append(first_arg is None and name not in _SHELLS and _is_inert(name, cmd, self.inert))
        fed = _fed(cmd)
        program, doc = self.program(cmd, name, p, first_arg, wrappers, fed)
        self.word_spans(words, p, program)
        for start, end, *_ in fed:
            if not any(s == start and k == "nested" for s, _, k, _ in self.spans):
                self.spans.append((start, end, doc, None))

    def program(self, cmd: Command, name: str, p: int, first_arg: int | None, wrappers: list[str],
                fed: list[tuple[int, int, str, bool, bool]]) -> tuple[str, str]:
        """Act on the command's program (a launcher, a shell, eval, source); the kind of its words and of
        the texts fed to it."""
        words = cmd.words
        if first_arg is not None:
            self.launcher(_Call(cmd, p, first_arg, wrappers))
            return "launcher", "exposed"
        if name in _SHELLS:
            return "exposed", "nested" if self.shell(cmd, name, p, fed) else "exposed"
        if name == "eval" and p + 1 < len(words):
            self.eval(words[p + 1 :])
        elif name in ("source", ".") and p + 1 < len(words):
            self.scan.notes.append(f"`{name} {words[p + 1].raw}` reads a script the runner does not look into")
        elif self.inert[-1]:
            return "inert", "exposed"
        return "exposed", "exposed"

    def word_spans(self, words: list[Word], p: int, program: str) -> None:
        """Each word's span with its kind: a launcher's wrappers are exposed; an inert program's `$(...)`
        words are containers (what runs inside is judged by its own words)."""
        for k, w in enumerate(words):
            kind = program
            if kind == "launcher" and k < p:
                kind = "exposed"
            if kind == "inert" and w.expanded:
                kind = "container"
            self.spans.append((w.start, w.end, kind, w.value))

    def launcher(self, call: _Call) -> None:
        self.scan.calls.append(call)
        if "xargs" in call.wrappers:
            shown = self.script.text(call.cmd.start, call.cmd.end)
            self.scan.refusals.append(f"`{shown}` runs the launcher through xargs, which adds arguments from its input")
        self.scan.refusals.extend(_uncertain_args(call))

    def shell(self, cmd: Command, name: str, p: int, fed: list[tuple[int, int, str, bool, bool]]) -> bool:
        """A shell (`bash -c STRING`, `bash script`, or fed on stdin); True when its fed texts were read."""
        words = cmd.words
        at, has_c = _shell_c_string(words, p)
        if has_c and at is not None:
            self.shell_c(name, words[at])
        elif at is not None:
            self.scan.notes.append(f"`{name} {words[at].raw}` runs a script the runner does not look into "
                                   "(a launcher call there is not checked or rewritten)")
        elif cmd.piped_in:
            self.scan.refusals.append(f"commands are piped into `{name}`: the runner cannot see what it runs")
        if at is not None:
            return False
        self.fed_texts(name, fed)
        return bool(fed)

    def fed_texts(self, name: str, fed: list[tuple[int, int, str, bool, bool]]) -> None:
        """The heredocs and herestrings fed to shell `name`: read when quoted, refused when expanded at run time
        and mentioning the launcher or --autokill."""
        for start, end, body, readable, raw in fed:
            what = f"the {'heredoc' if raw else 'herestring'} fed to `{name}`"
            if readable:
                self.nest(start, end, body, what, raw)
            elif _mentions(body):
                how = "<<'EOF'" if raw else "<<< '...'"
                self.scan.refusals.append(f"{what} is expanded at run time and mentions the launcher or --autokill; "
                                          f"quote it: {how}")

    def shell_c(self, name: str, w: Word) -> None:
        if not w.expanded:
            self.nest(w.start, w.end, w.value, f"the `{name} -c` string", False)
        elif _mentions(w.raw):
            self.scan.refusals.append(f"the `{name} -c` string `{w.raw}` is built at run time and mentions "
                                      "the launcher or --autokill")
        else:
            self.scan.notes.append(f"`{name} -c {w.raw}` runs a string built at run time")

    def eval(self, rest: list[Word]) -> None:
        if not any(w.expanded for w in rest):
            self.nest(rest[0].start, rest[-1].end, " ".join(w.value for w in rest), "the `eval` text", False)
        elif any(_mentions(w.raw) for w in rest):
            self.scan.refusals.append("an `eval` built at run time mentions the launcher or --autokill")


@lru_cache(maxsize=256)
def _scan(text: str, depth: int) -> _Scan:
    """The launcher calls and nested shell strings of `text` (one level), and what cannot be read.

    Cached: the preflight asks several questions of one command (analyse, drop hazards, point
    --conf, add a flag, find its segment); callers read the result and never change it."""
    scanner = _Scanner(parse(text), depth)
    for cmd in scanner.script.commands:
        scanner.command(cmd)
    if _unreadable(scanner.script, scanner.scan):
        return scanner.scan
    _check_exposed(scanner.script, scanner.spans, scanner.scan)
    return scanner.scan


def _check_exposed(script: Script, spans: list[tuple[int, int, str, str | None]], scan: _Scan) -> None:
    """Refuse `--autokill` (any spelling) or the launcher's name where the runner cannot follow it."""
    for start, end, what in _exposure_hits(script.data, spans):
        word = _exposed_word(script, spans, start, end)
        if word is None:
            continue
        shown = word if len(word) <= 80 else word[:77] + "..."
        if what == "hazard":
            scan.refusals.append(f"`{shown}` carries --autokill/--kill where the runner cannot tell whether it "
                                 "reaches the launcher (a variable, a file, another program)")
        else:
            scan.refusals.append(f"`{shown}` starts the launcher in a way the runner cannot read or rewrite")


def _exposure_hits(data: bytes, spans: list[tuple[int, int, str, str | None]]) -> list[tuple[int, int, str]]:
    """(start, end, "hazard" or "launcher") of each spelling of `--autokill` or of the launcher in the text,
    those bash assembles from quotes (-""-autokill) included."""
    hits: list[tuple[int, int, str]] = []
    for m in _HAZARD_BYTES.finditer(data):
        hits.append((m.start(), m.end(), "hazard"))
    for m in _LAUNCHER_BYTES.finditer(data):
        hits.append((m.start(), m.end(), "launcher"))
    for start, end, kind, value in spans:
        if kind in ("exposed", "container") and value is not None and hazard_of(value) \
                and not _HAZARD_BYTES.search(data, start, end):
            hits.append((start, end, "hazard"))
    return hits


def _line_around(script: Script, start: int, end: int) -> str:
    """The line holding bytes [start, end), stripped."""
    data = script.data
    line_start = data.rfind(b"\n", 0, start) + 1
    line_end = data.find(b"\n", end)
    return script.text(line_start, len(data) if line_end < 0 else line_end).strip()


def _exposed_word(script: Script, spans: list[tuple[int, int, str, str | None]], start: int, end: int) -> str | None:
    """The word (or, held by no command word, the line) a hit at [start, end) is in; None when the innermost
    span holding it is one the runner follows (a launcher call, a nested text, an inert word, a comment)."""
    around = [s for s in spans if s[0] <= start and end <= s[1]]
    if not around:  # no command word holds it: a `for` list, a function's name, ...
        return _line_around(script, start, end)
    inner = min(around, key=lambda s: s[1] - s[0])
    if inner[2] in ("launcher", "nested", "inert", "comment"):
        return None
    if inner[2] == "container" and any(s[2] != "container" for s in around if s is not inner):
        return None
    return script.text(inner[0], inner[1]).strip()


def _walk_calls(text: str, depth: int = 0, where: str = "", origin: int | None = None,
                origins: list[int] | None = None) -> CommandAnalysis:
    """The analysis of `text` and of every shell text nested in it; `origins` gets, per call, the byte
    offset in the top-level text of what holds it (the call itself, or the outermost nested string)."""
    scan = _scan(text, depth)
    result = CommandAnalysis(refusals=[f"{r} ({where})" if where else r for r in scan.refusals],
                             notes=list(scan.notes))
    for call in scan.calls:
        result.calls.append(_launcher_call(scan, call, where))
        if origins is not None:
            origins.append(call.cmd.start if origin is None else origin)
    for n in scan.nested:
        inner = _walk_calls(n.inner, depth + 1, f"in {n.what}" + (f", {where}" if where else ""),
                            n.start if origin is None else origin, origins)
        result.calls += inner.calls
        result.refusals += inner.refusals
        result.notes += inner.notes
    return result


def _launcher_call(scan: _Scan, call: _Call, where: str) -> LauncherCall:
    """A launcher call found by the scan, as the analysis reports it."""
    conf, expanded = _conf_of(call)
    return LauncherCall(
        text=scan.script.text(call.cmd.start, call.cmd.end), where=where,
        args=tuple(w.value for w in call.args), conf=conf, conf_expanded=expanded,
        hazards=tuple(w.raw for w in call.args if hazard_of(w.value)))


def _conf_word(call: _Call) -> tuple[int, bool] | None:
    """(index in call.cmd.words, value is a separate word) of the launcher's --conf."""
    words = call.cmd.words
    for k in range(call.first_arg, len(words)):
        if _value_option(words[k].value) == "--conf":
            separate = "=" not in words[k].value
            return (k + 1 if separate else k), separate
    return None


def _conf_of(call: _Call) -> tuple[str | None, bool]:
    found = _conf_word(call)
    if found is None:
        return None, False
    k, separate = found
    words = call.cmd.words
    if k >= len(words):
        return None, False
    w = words[k]
    value = w.value if separate else w.value.split("=", 1)[1]
    return value, w.expanded


def _analyze(cmd: str, origins: list[int] | None = None) -> CommandAnalysis:
    if not isinstance(cmd, str) or not cmd.strip():
        return CommandAnalysis()
    if len(cmd) > LAUNCH_COMMAND_MAX_CHARS:
        return CommandAnalysis(refusals=[f"the command is {len(cmd):,} characters long; at most "
                                         f"{LAUNCH_COMMAND_MAX_CHARS:,} are read (put a long script in a file)"])
    result = _walk_calls(cmd, origins=origins)
    result.refusals = list(dict.fromkeys(result.refusals))
    result.notes = list(dict.fromkeys(result.notes))
    return result


def analyze_command(cmd: str) -> CommandAnalysis:
    """Every launcher call of `cmd` (at any depth), and why it cannot be run, if it cannot."""
    return _analyze(cmd)


# ------------------------------------------------------------------------------- rewriting

_Edit = tuple[int, int, str]  # a byte range of the text and what replaces it
_EditFn = Callable[[_Call], list[_Edit]]


def _rewrite(text: str, edit: _EditFn, depth: int = 0) -> str:
    """Apply `edit` to every launcher call of `text`, recursing into nested shell strings; edits splice
    byte ranges of the original text."""
    if len(text) > LAUNCH_COMMAND_MAX_CHARS:
        return text
    scan = _scan(text, depth)
    edits: list[_Edit] = []
    for call in scan.calls:
        edits += edit(call)
    for n in scan.nested:
        new = _rewrite(n.inner, edit, depth + 1)
        if new != n.inner:
            edits.append((n.start, n.end, new if n.raw_splice else shlex.quote(new)))
    if not edits:
        return text
    return decode(_splice(scan.script.data, edits))


def _splice(data: bytes, edits: list[_Edit]) -> bytes:
    """`data` with each edit's byte range replaced by its text; an edit inside a larger one is dropped (e.g.
    a call inside a --conf value being replaced)."""
    kept: list[_Edit] = []
    for e in sorted(edits, key=lambda e: (e[0], -e[1])):
        if kept and e[0] < kept[-1][1]:
            continue  # inside a larger edit
        kept.append(e)
    out, at = [], 0
    for start, end, new in kept:
        out += [data[at:start], encode(new)]
        at = end
    out.append(data[at:])
    return b"".join(out)


def _last_word_end(call: _Call) -> int:
    return call.cmd.words[-1].end


def _removal(call: _Call, match: Callable[[str], tuple[bool, bool]]) -> list[_Edit]:
    """Edits that drop each launcher argument `match` accepts, with the blank before it (and its value
    word when `match` says it takes one)."""
    words, edits, k = call.cmd.words, [], call.first_arg
    while k < len(words):
        remove, takes_value = match(words[k].value)
        if remove:
            last = k + 1 if takes_value and "=" not in words[k].value and k + 1 < len(words) else k
            edits.append((words[k].gap, words[last].end, ""))
            k = last + 1
            continue
        k += 1
    return edits


def has_launcher(cmd: str) -> bool:
    """Whether any launcher call is found in the command (at any depth)."""
    return bool(analyze_command(cmd).calls)


class Program(NamedTuple):
    """One simple command from its real program on (see `programs`)."""

    words: list[str]  # as bash sees them, past assignments and wrappers
    start: int  # byte offset of the command (its first word or assignment) in the text
    launcher: bool  # a launcher call
    wrappers: tuple[str, ...]  # the wrappers in front of it (`env`, `nohup`, `proxychains4`)


def programs(cmd: str) -> list[Program]:
    """Each simple command of `cmd` (top level and nested alike) from its real program on, past assignments
    and wrappers (`env A=1`, `nohup`, `proxychains4 -q`), as bash sees the words. What runs a launcher the
    command does not show (`bash scripts/train.sh`, `make`) and which command printed a failure are found here."""
    if not isinstance(cmd, str) or not cmd.strip():
        return []
    out: list[Program] = []
    for command in parse(cmd).commands:
        p, wrappers = _resolve(command.words)
        if p < len(command.words):
            out.append(Program([w.value for w in command.words[p:]], command.start,
                               _launcher_args_at(command.words, p) is not None, tuple(wrappers)))
    return out


def prefix_command_at(cmd: str, start: int, prefix: str) -> str:
    """Run the simple command at byte offset `start` (a `Program.start`) behind `prefix` (`proxychains4 -q`),
    after its assignments and wrappers; unchanged when it already runs behind proxychains. The rest of the
    text stays byte for byte (the seed's rule: `python xxx.py` → `proxychains python xxx.py`)."""
    for command in parse(cmd).commands:
        if command.start != start:
            continue
        p, wrappers = _resolve(command.words)
        if p >= len(command.words) or _PROXYCHAINS & set(wrappers):
            return cmd
        data = encode(cmd)
        at = command.words[p].start
        return decode(data[:at] + encode(prefix.strip() + " ") + data[at:])
    return cmd


def split_chain(cmd: str) -> list[str]:
    """The commands of the top-level chain, split on `&&`, `||`, `;`, `&` and newlines (for `cd` tracking);
    subshells, `{ ...; }`, `if`, loops and functions stay whole."""
    if not isinstance(cmd, str) or not cmd.strip():
        return []
    script = parse(cmd)
    return [script.text(s.start, s.end) for s in script.segments]


def launcher_segment(cmd: str) -> int | None:
    """Index in `split_chain(cmd)` of the command holding the first launcher call (also when the call
    is inside a `bash -c` string or heredoc there); None when there is no launcher."""
    origins: list[int] = []
    if not _analyze(cmd, origins).calls:
        return None
    segments = parse(cmd).segments
    if not segments:
        return None
    first = min(origins)
    for k, seg in enumerate(segments):
        if any(s <= first < e for s, e in seg.owns):
            return k
    return max([0, *(k for k, seg in enumerate(segments) if seg.start <= first)])


def conf_paths(cmd: str) -> list[str | None]:
    """The --conf value of every launcher call (None where a call has none)."""
    return [c.conf for c in analyze_command(cmd).calls]


def conf_path(cmd: str) -> str | None:
    """The first launcher call's `--conf` value (`--conf X`, `--conf=X`, argparse prefixes), unquoted."""
    return next((c for c in conf_paths(cmd) if c is not None), None)


def replace_conf(cmd: str, new: str) -> str:
    """Point `--conf` of every launcher call at `new` (keeping its form); add it where absent."""
    quoted = shlex.quote(new)

    def edit(call: _Call) -> list[_Edit]:
        words = call.cmd.words
        found = _conf_word(call)
        if found is None:
            return [(_last_word_end(call), _last_word_end(call), f" --conf {quoted}")]
        k, separate = found
        if separate:
            if k >= len(words):
                return [(words[-1].end, words[-1].end, f" {quoted}")]
            return [(words[k].start, words[k].end, quoted)]
        option = words[k].raw.split("=", 1)[0]
        return [(words[k].start, words[k].end, f"{option}={quoted}")]

    return _rewrite(cmd, edit)


def _flag_present(call: _Call, flag: str) -> bool:
    return any(w.value == flag or w.value.startswith(flag + "=") for w in call.args)


def has_flag(cmd: str, flag: str) -> bool:
    """Whether any launcher call carries `flag` (alone or as `flag=value`; the hazards in any spelling)."""
    name = flag.split()[0] if flag.split() else ""
    if not name:
        return False
    for call in analyze_command(cmd).calls:
        for arg in call.args:
            if arg == name or arg.startswith(name + "=") or (name in HAZARD_FLAGS and hazard_of(arg) == name):
                return True
    return False


def remove_flag(cmd: str, flag: str, *, takes_value: bool = False) -> str:
    """Drop `flag` (and its value word when `takes_value`) from every launcher call.

    `--autokill` and `--kill` are matched in every spelling argparse accepts.
    """
    if not flag:
        return cmd

    def match(value: str) -> tuple[bool, bool]:
        if value == flag or value.startswith(flag + "="):
            return True, takes_value
        if flag in HAZARD_FLAGS and hazard_of(value) == flag:
            return True, takes_value
        return False, False

    return _rewrite(cmd, lambda call: _removal(call, match))


def remove_hazards(cmd: str) -> str:
    """Drop `--autokill` and `--kill <keywords>`, in every spelling, from every launcher call."""
    return _rewrite(cmd, lambda call: _removal(call, lambda v: (bool(hazard_of(v)), hazard_of(v) == "--kill")))


def point_command_at(cmd: str, config: str, codebase: str) -> str:
    """The command with its `--conf` pointing at `config` (relative to `codebase` when inside it);
    unchanged when the command has no `--conf`."""
    if conf_path(cmd) is None:
        return cmd
    try:
        return replace_conf(cmd, str(PurePath(config).relative_to(codebase)))
    except ValueError:
        return replace_conf(cmd, str(config))


def add_flag(cmd: str, flag: str) -> str:
    """Append `flag` to every launcher call that lacks it (before its redirections); idempotent."""
    flag = flag.strip()
    if not flag:
        return cmd

    def edit(call: _Call) -> list[_Edit]:
        if _flag_present(call, flag.split()[0]):
            return []
        return [(_last_word_end(call), _last_word_end(call), f" {flag}")]

    return _rewrite(cmd, edit)


def prefix_launcher(cmd: str, prefix: str) -> str:
    """Run every launcher call behind `prefix` (e.g. `proxychains4 -q`), after `VAR=val` words; idempotent."""
    prefix = prefix.strip()
    try:
        prefix_words = shlex.split(prefix)
    except ValueError:
        prefix_words = prefix.split()
    if not prefix_words:
        return cmd
    head = os.path.basename(prefix_words[0])
    same = _PROXYCHAINS if head in _PROXYCHAINS else {head}

    def edit(call: _Call) -> list[_Edit]:
        if same & set(call.wrappers):
            return []
        at = call.cmd.words[0].start
        return [(at, at, prefix + " ")]

    return _rewrite(cmd, edit)
