"""A launcher the command does not show: what runs it (`bash scripts/train.sh`, `make train`, a wrapper), and
the launcher call found by reading that script file. Read, never rewritten.

The runner changes what a launcher call receives by rewriting the command (`--conf` at its YAML copy,
flags, a prefix). When the call sits inside a script the command runs, none of that reaches it: the
preflight then plans no change and says so (statemachine/fixes/preflight.py), and the report names no change
the process did not receive. The script is read one level deep with the same bash parser; a Makefile's
recipe lines are read as shell lines.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ajet_runner.statemachine.shell import command as cmdlib

__all__ = ["MAX_SCRIPT_BYTES", "HiddenLauncher", "hidden_launcher", "runs_script"]

MAX_SCRIPT_BYTES = 256 * 1024
"""A longer script is not read (a real training script is a few KB)."""

_SOURCE = frozenset({"source", "."})


@dataclass(frozen=True)
class HiddenLauncher:
    """What runs the launcher when the command shows no launcher call, and what reading it found."""

    runs: str  # the command's words that run it, e.g. `bash scripts/train.sh`, `make train`
    script: str = ""  # the file read (absolute); "" when there is none to read (a program on PATH)
    launcher: str = ""  # the launcher call found in it, as written ("" when none was found)
    line: int | None = None  # its line in the file
    conf: str | None = None  # its --conf, as written
    problem: str = ""  # why the file could not be read ("" when it was)
    cwd: str = ""  # where the command starts: the script is shown relative to it

    def shown(self) -> str:
        """The script's path as the reader knows it: relative to the codebase when inside it."""
        if self.cwd and self.script.startswith(self.cwd.rstrip("/") + "/"):
            return os.path.relpath(self.script, self.cwd)
        return self.script

    def sentence(self) -> str:
        """One line for `check`, the report and the repair log."""
        where = f"`{self.runs}`"
        if self.problem:
            found = f"{where}, whose script cannot be read ({self.problem})"
        elif self.launcher:
            conf = f", --conf {self.conf}" if self.conf else ", no --conf"
            found = (f"{where}, which calls the launcher ({self.shown()} line {self.line}: "
                     f"`{' '.join(self.launcher.replace(chr(92) + chr(10), ' ').split())[:160]}`{conf})")
        elif self.script:
            found = f"{where}; no launcher call was found in {self.shown()}"
        else:
            found = f"{where}, a program the runner cannot look into"
        return (f"no launcher call is visible in the command: it runs {found}. The runner does not rewrite a "
                "script, so no preflight change applies (the YAML, flags and command run as written)")


def runs_script(words: list[str], cwd: str) -> tuple[str, str] | None:
    """(the words that run a script, the script's path) for one simple command; None when it runs none."""
    name = os.path.basename(words[0])
    if name in cmdlib.SHELLS:
        return _shell_script(words)
    if name in _SOURCE and len(words) > 1:
        return " ".join(words[:2]), words[1]
    if name in ("make", "gmake"):
        return _makefile(words, cwd)
    if "/" in words[0] or words[0].endswith(".sh"):
        return " ".join(words[:3]), words[0]
    return None


def _shell_script(words: list[str]) -> tuple[str, str] | None:
    """The script a shell runs (its first operand); None for `bash -c '…'` (the command analysis reads the
    string itself) or a shell reading stdin."""
    rest = [w for w in words[1:] if not w.startswith(("-", "+"))]
    if any(w.startswith("-") and "c" in w[1:] and not w.startswith("--") for w in words[1:]):
        return None
    return (" ".join(words[:2 + words[1:].index(rest[0])]), rest[0]) if rest else None


def _makefile(words: list[str], cwd: str) -> tuple[str, str]:
    """The makefile `make` reads: `-f` names it, `-C` its directory, else the first of make's names there."""
    directory, makefile = cwd, ""
    for i, w in enumerate(words[:-1]):
        if w in ("-C", "--directory"):
            directory = os.path.join(cwd, words[i + 1])
        if w in ("-f", "--file", "--makefile"):
            makefile = words[i + 1]
    found = makefile or next((m for m in ("GNUmakefile", "makefile", "Makefile")
                              if os.path.isfile(os.path.join(directory, m))), "Makefile")
    return " ".join(words[:4]), os.path.join(directory, found)


def _read(path: str) -> tuple[str, str]:
    """(text, problem): the script's text, or why it cannot be read (missing, too big, not UTF-8)."""
    try:
        size = os.path.getsize(path)
        if size > MAX_SCRIPT_BYTES:
            return "", f"{size:,} bytes, more than the {MAX_SCRIPT_BYTES:,} read"
        with open(path, "rb") as fh:
            data = fh.read(MAX_SCRIPT_BYTES + 1)
    except OSError as exc:
        return "", exc.strerror or type(exc).__name__
    try:
        return data.decode("utf-8"), ""
    except UnicodeDecodeError as exc:
        return "", f"not UTF-8 text (byte {exc.start})"


def _find_call(text: str, makefile: bool) -> tuple[cmdlib.LauncherCall, int] | None:
    """The first launcher call in a script's text (a Makefile: in its recipe lines), with its line."""
    if makefile:
        for number, line in enumerate(text.splitlines(), 1):
            if line.startswith("\t"):
                calls = cmdlib.analyze_command(line.strip().lstrip("@-+").strip()).calls
                if calls:
                    return calls[0], number
        return None
    calls = cmdlib.analyze_command(text).calls
    if not calls:
        return None
    at = text.find(calls[0].text)
    return calls[0], (text[:at].count("\n") + 1 if at >= 0 else 1)


def hidden_launcher(command: str, cwd: str) -> HiddenLauncher | None:
    """For a command with no visible launcher call: the script (or program) that runs it, read from `cwd`
    (where the command starts). None when the command shows a launcher call, or runs nothing but shell
    built-ins and inert tools."""
    if cmdlib.analyze_command(command).calls:
        return None
    other, without = "", None
    for words, *_ in cmdlib.programs(command):
        found = runs_script(words, cwd)
        if found is None:
            other = other or _active_program(words)
            continue
        runs, path = found
        path = os.path.normpath(os.path.join(cwd, os.path.expanduser(path)))
        text, problem = _read(path)
        if problem:
            return HiddenLauncher(runs=runs, script=path, problem=problem, cwd=cwd)
        hit = _find_call(text, os.path.basename(path).lower().endswith("makefile"))
        if hit is None:
            without = without or HiddenLauncher(runs=runs, script=path, cwd=cwd)
            continue
        call, line = hit
        return HiddenLauncher(runs=runs, script=path, launcher=call.text, line=line, conf=call.conf, cwd=cwd)
    if without is not None:
        return without
    return HiddenLauncher(runs=other) if other else None


def _active_program(words: list[str]) -> str:
    """The command shown (its first words) when it runs a program that may start the launcher: no shell
    and no inert tool; "" otherwise."""
    name = os.path.basename(words[0])
    if name in cmdlib.INERT_PROGRAMS or name in cmdlib.SHELLS:
        return ""
    return " ".join(words[:3])
