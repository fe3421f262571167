"""Which line of the launch command printed a failure: the download step, the `pip install`, the launcher.

The seed's rule for a network failure is to run the failing command behind proxychains
(`python xxx.py` → `proxychains python xxx.py`), so the repair has to know which command failed. The
log is one stream, so this reads what the failure itself says: the first frame of the traceback it
closes (`File "/code/download.py"`, `File "/venv/bin/huggingface-cli"`, `…/ajet/launcher.py`), or pip's
own `ERROR:` lines. A failure no command of the chain can be tied to is None: the caller falls back to
the launcher's line and says so.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ajet_runner.statemachine.shell import command as cmdlib
from ajet_runner.statemachine.shell.script_launcher import runs_script

__all__ = ["FailingCommand", "failing_command"]

_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+')
_TRACEBACK = "Traceback (most recent call last):"
_PIP = re.compile(r"^(?:ERROR: (?:Could not|No matching distribution)|.*[/\\]pip[/\\]_internal[/\\])")
_LOOK_BACK = 400  # lines between a traceback's head and its last line (a deep stack is ~100)
_PYTHON = re.compile(r"^python(?:\d+(?:\.\d+)?)?$")


@dataclass(frozen=True)
class FailingCommand:
    """One simple command of the launch command, and how the log tied the failure to it."""

    start: int  # byte offset of the command in the launch command's text (statemachine/command.programs)
    shown: str  # its first words, e.g. `python download.py`
    launcher: bool  # it is a launcher call
    how: str  # e.g. "the traceback starts in /code/download.py"


def _entry(words: list[str]) -> tuple[str, str]:
    """(the file a command runs, the module it runs with -m) as the traceback's first frame would name them."""
    name = os.path.basename(words[0])
    if _PYTHON.match(name):
        return _python_entry(words)
    if name in cmdlib.SHELLS:
        rest = [w for w in words[1:] if not w.startswith(("-", "+"))]
        return (rest[0], "") if rest else ("", "")
    return words[0], ""


def _python_entry(words: list[str]) -> tuple[str, str]:
    """(script, module) of a python command line: the first argument that is no option, or `-m MODULE`."""
    for i, w in enumerate(words[1:], 1):
        if w == "-m" and i + 1 < len(words):
            return "", words[i + 1]
        if w.startswith("-m") and len(w) > 2:
            return "", w[2:]
        if not w.startswith("-"):
            return w, ""
    return "", ""


def _matches(frame: str, words: list[str]) -> bool:
    path, module = _entry(words)
    frame = frame.replace("\\", "/")
    if module:
        stem = module.replace(".", "/")
        return frame.endswith((f"/{stem}.py", f"/{stem}/__main__.py"))
    return bool(path) and os.path.basename(frame) == os.path.basename(path)


def _is_pip(words: list[str]) -> bool:
    name = os.path.basename(words[0])
    if name in ("pip", "pip3") or (name == "uv" and words[1:2] == ["pip"]):
        return True
    return bool(_PYTHON.match(name)) and "-m" in words and words[words.index("-m") + 1:][:1] == ["pip"]


def _first_frame(lines: Sequence[str], at: int) -> str:
    """The first frame's file of the traceback that line `at` closes (or sits in); "" when there is none."""
    for i in range(at, max(-1, at - _LOOK_BACK), -1):
        if _TRACEBACK in lines[i]:
            for line in lines[i + 1: at + 1]:
                m = _FRAME.match(line)
                if m:
                    return m.group(1)
            return ""
    return ""


def failing_command(command: str, lines: Sequence[str], text: str) -> FailingCommand | None:
    """The command of `command` whose output holds the failure line `text` (found in `lines`, the log's
    tail); None when the log does not tell."""
    needle = text.strip()[:120]
    at = next((i for i in range(len(lines) - 1, -1, -1) if needle and needle in lines[i]), None)
    if at is None:
        return None
    commands = cmdlib.programs(command)
    frame = _first_frame(lines, at)
    return (_by_frame(commands, frame) or _by_pip_lines(commands, lines[max(0, at - 30): at + 1])
            or _by_script(commands, frame))


def _in_launcher(frame: str) -> bool:
    """Whether a traceback's first frame is AgentJet's launcher."""
    return frame.replace("\\", "/").endswith("ajet/launcher.py")


def _by_frame(commands: list[cmdlib.Program], frame: str) -> FailingCommand | None:
    """The command that runs the file of the traceback's first frame (the launcher, or a script by name)."""
    if not frame:
        return None
    for p in commands:
        if (p.launcher and _in_launcher(frame)) or _matches(frame, p.words):
            return FailingCommand(p.start, " ".join(p.words[:3]), p.launcher, f"the traceback starts in {frame}")
    return None


def _by_pip_lines(commands: list[cmdlib.Program], near: Sequence[str]) -> FailingCommand | None:
    """The pip command, when pip's error lines come just before the failure line (`near`)."""
    if any(_PIP.match(line) for line in near):
        for p in commands:
            if _is_pip(p.words):
                return FailingCommand(p.start, " ".join(p.words[:4]), False, "pip's error lines")
    return None


def _by_script(commands: list[cmdlib.Program], frame: str) -> FailingCommand | None:
    """The command running the script that runs the launcher, when the traceback starts in the launcher and
    no command runs it directly: proxychains in front of that command reaches it."""
    if not (frame and _in_launcher(frame)) or any(p.launcher for p in commands):
        return None
    runner = next((p for p in commands if runs_script(p.words, "")), None)
    if runner is None:
        return None
    shown = " ".join(runner.words[:3])
    return FailingCommand(runner.start, shown, False, f"the traceback starts in {frame}, which `{shown}` runs")
