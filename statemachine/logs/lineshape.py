"""What shape a cleaned log line has: is it evidence of a failure, or text that only mentions one?

A catalogue pattern says *what* a failure is; the shape of the line says whether the line *reports*
it. An exception printed by Python (`torch.OutOfMemoryError: CUDA out of memory ...`), the last
line of a traceback, a logger's ERROR record, or the shell's own report (`bash: line 1: 4010
Killed ...`) reports a failure. An echoed environment variable (`PYTORCH_CUDA_ALLOC_CONF=...
(to avoid CUDA out of memory)`), a warning, a config dump or help text printed at start, or a
line that says the error is being retried only mentions one. Lines are matched after
`logtext.clean_line` (no ANSI, no Ray prefix), so "line start" is where the program's own text
begins. Formats follow what AgentJet's stack prints: loguru (`2025-06-12 10:41:07.118 | ERROR |
mod:func:12 - ...`), Python `logging`, vLLM (`ERROR 06-12 10:04:02 [file.py:12] ...`), Ray's
Python and C++ loggers, glog/c10d (`[rank3]:[E612 11:02:41 ...]`).
"""

from __future__ import annotations

import re
from enum import Enum

__all__ = ["DEFAULT_SHAPES", "Shape", "announces_retry", "is_error_record", "is_exception_line", "is_info_record",
           "is_shell_report", "is_warning_record"]


class Shape(str, Enum):
    """The ways a line can carry evidence; a catalogue entry may accept more than the default."""

    exception = "exception"  # `pkg.SomeError: message` (or a bare `KeyboardInterrupt`) at line start
    traceback_end = "traceback_end"  # an exception line that ends an open traceback
    error_record = "error_record"  # a logger's ERROR / CRITICAL / FATAL record
    shell = "shell"  # the shell's own report: `bash: line 1: 4010 Killed ...`, `/bin/sh: 1: x: not found`
    line_start = "line_start"  # the entry's own pattern matches at line start (only where the entry says so)
    warning_record = "warning_record"  # a WARNING record (only where the entry says so: a stuck-forever warning)

    def __str__(self) -> str:
        return self.value


DEFAULT_SHAPES = frozenset({Shape.exception, Shape.traceback_end, Shape.error_record, Shape.shell})

# An exception's type as Python prints it: a dotted name whose last part is an exception class
# (CamelCase ending in Error/Exception/..., a class of an `exceptions` or `errors` module, or a
# dotted lower-case `...error` such as socket.gaierror), optionally with Ray's `(Cause)`.
_EXC_NAME = (
    r"(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Timeout|Failure|Fault|Iteration)|Exception)"
    r"|(?:[A-Za-z_]\w*\.)*(?:exceptions|errors)\.[A-Z]\w*"
    r"|(?:[A-Za-z_]\w*\.)+[a-z]\w*error"
)
_EXCEPTION = re.compile(rf"^(?:{_EXC_NAME})(?:\([^()\n]*\))?(?::(?:\s|$)|$)")

_TS = r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?"


def _records(levels: str, glog: str) -> re.Pattern[str]:
    return re.compile(
        rf"^{_TS}\s*\|\s*(?:{levels})\s*\|"  # loguru
        rf"|^(?:{levels})(?::|\s+\S)"  # logging's basic format, vLLM, trinity
        rf"|^{_TS}\s+(?:{levels})\s"  # Ray's Python logger, logging with asctime
        rf"|^{_TS} - [\w.]+ - (?:{levels}) - "  # logging's "asctime - name - level - msg"
        rf"|^(?:\[[^\]\n]*\]\s*)?\[(?:{levels})\]"  # [ERROR] msg, [time][ERROR] msg
        rf"|^\[{_TS} (?:{glog}) \d+ \d+\]"  # Ray's C++ logger: [2025-06-12 11:12:31,602 E 39877 39877]
        rf"|^(?:\[rank\d+\]:)?\[(?:{glog})(?:\d{{3,4}}(?: \d\d:\d\d:\d\d\S*)?)? [\w.]+:\d+\]"  # c10d, [rank3]:[E612 ..
        rf"|^(?:{glog})\d{{4}} \d\d:\d\d:\d\d"  # glog: E0612 10:00:00.123456  1234 file.cc:12] ...
    )


_ERROR_RECORD = _records("ERROR|CRITICAL|FATAL", "E|F")
_TOOL_ERROR = re.compile(r"^[a-z][\w.-]*: (?:ERROR\b|Error:)")  # swanlab: Error: 401 ..., wandb: ERROR api_key ...
_WARNING_RECORD = _records("WARNING|WARN", "W")
_INFO_RECORD = _records("INFO|DEBUG|SUCCESS|TRACE", "I")
_SHELL = re.compile(r"^(?:\S*/)?(?:ba|da|z|k|c|tc)?sh: ")
# The error is being handled: a line that says so is not the failure, nor is the traceback it introduces.
_RETRY = re.compile(
    r"\bre-?trying\b|\bwill (?:be )?retr(?:y|ied)\b|\bretr(?:y|ies) (?:in|with|after)\b|\bretries left\b"
    r"|\bfalling back\b",
    re.IGNORECASE,
)


def is_exception_line(text: str) -> bool:
    """`pkg.SomeError: message` (or a bare exception name) at the start of the cleaned line."""
    return _EXCEPTION.match(text) is not None


def is_error_record(text: str) -> bool:
    """A logger's ERROR / CRITICAL / FATAL record, or a tool's own `name: Error: ...` line."""
    return _ERROR_RECORD.match(text) is not None or _TOOL_ERROR.match(text) is not None


def is_warning_record(text: str) -> bool:
    return _WARNING_RECORD.match(text) is not None


def is_info_record(text: str) -> bool:
    """An INFO / DEBUG / SUCCESS record: the trainer's ordinary log output."""
    return _INFO_RECORD.match(text) is not None


def is_shell_report(text: str) -> bool:
    """The shell's own report about a command (`bash: line 1: 4010 Killed ...`)."""
    return _SHELL.match(text) is not None


def announces_retry(text: str) -> bool:
    """The line says the error is caught and retried (or worked around): not a verdict."""
    return _RETRY.search(text) is not None
