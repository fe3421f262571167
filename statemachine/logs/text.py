"""Turn one raw terminal log line into the text a person would read.

Signatures are matched on cleaned lines only, so colour codes, tqdm redraws and Ray's
per-process prefixes never decide whether a pattern matches.
"""

from __future__ import annotations

import re

# ECMA-48 escapes: OSC (ESC ] ... BEL or ESC \), DCS/SOS/PM/APC strings, CSI sequences,
# 8-bit CSI, two-byte escapes; and a lone trailing ESC left by a truncated write.
# No alternative can match a newline, so a block of lines can be cleaned in one call.
_ANSI = re.compile(
    r"""
    \x1b\][^\x07\x1b\n]*(?:\x07|\x1b\\)?    # OSC: hyperlinks, window titles
    | \x1b[PX^_][^\x1b\n]*(?:\x1b\\)?       # DCS, SOS, PM, APC strings
    | \x1b\[[0-?]*[ -/]*[@-~]               # CSI: colours, cursor moves, erase line
    | \x9b[0-?]*[ -/]*[@-~]                 # 8-bit CSI
    | \x1b[ -/]*[0-~]                       # two-byte escapes (charset, keypad, ...)
    | \x1b                                  # stray ESC
    """,
    re.VERBOSE,
)
# Other C0 controls that terminals do not print (tab is kept, \r is handled separately).
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")

# Ray driver prefixes: "(TaskRunner pid=40211) ", "(WorkerDict pid=41877, ip=10.0.0.1) ",
# "(pid=123) ", "(raylet) ", "(raylet, ip=10.0.0.1) ", "(autoscaler +1m2s) ".
_RAY_PREFIX = re.compile(
    r"^\((?:[\w.:\-]+ )?pid=\d+(?:, ip=[^)\s]*)?\) ?"
    r"|^\((?:raylet|gcs_server|autoscaler|monitor|dashboard|log_monitor)\b[^)]*\) ?"
)
_REPEATED = re.compile(r"\s*\[repeated \d+x across cluster\]\s*$")


def _last_segment(line: str) -> str:
    """What a terminal shows after carriage-return redraws: the last non-blank segment."""
    for segment in reversed(line.split("\r")):
        if segment.strip():
            return segment
    return ""


def _strip_escapes(text: str) -> str:
    """Remove escape sequences and unprintable controls; never touches '\\n' or '\\r'."""
    if "\x1b" in text or "\x9b" in text:
        text = _ANSI.sub("", text)
    if _CONTROL.search(text):
        text = _CONTROL.sub("", text)
    return text


def clean_line(line: str) -> str:
    """Strip ANSI escapes, \\r redraws, Ray prefixes and Ray's repeat suffix; never raises."""
    return _finish(_strip_escapes(line))


def clean_lines(lines: list[str]) -> list[str]:
    """`[clean_line(x) for x in lines]` for lines without '\\n', with one regex pass per block."""
    if not lines:
        return []
    return [_finish(line) for line in _strip_escapes("\n".join(lines)).split("\n")]


def _finish(line: str) -> str:
    if "\r" in line:
        line = _last_segment(line)
    if line.startswith("("):
        # Ray nests nothing, but a colour reset can leave the prefix doubled after stripping.
        for _ in range(2):
            line = _RAY_PREFIX.sub("", line, count=1)
            if not line.startswith("("):
                break
    if "[repeated" in line:
        line = _REPEATED.sub("", line)
    return line.rstrip()
