"""Does a cleaned log line show the run making progress? The confirmation side of a verdict.

A fatal-looking line in a live run is confirmed only when nothing progresses after it. Progress
of any kind counts, not only training steps: a rollout or evaluation phase prints for minutes
without a step (`[rollout] step 3: 32 tasks ...`, tqdm bars, `=== + rollout step begin ===`,
`[validation] running 1319 tasks`, `step:10 - val-core/...`), and the trainer's own INFO records
(loguru, `logging`, vLLM) are its log output growing. Not progress: anything about the failure
itself or the teardown after it (errors, warnings, `Shutting down Ray`, a dead actor), a progress
bar redrawn at an old step (tqdm reprints its bar when the process exits), and vLLM's periodic
stats line while the engine is idle (it prints every few seconds even when the trainer hangs).
"""

from __future__ import annotations

import re

from ajet_runner.statemachine.logs.lineshape import is_error_record, is_info_record, is_warning_record

__all__ = ["NO_NUMBER", "may_show_progress", "may_show_steps", "shows_activity", "step_number"]

NO_NUMBER = -1  # a training step without a step number (a bare kl_loss value)

_STEP = re.compile(
    r"Training Progress[^\n]{0,60}?(?<![\d.])(\d+)[ \t]*/[ \t]*\d+"
    r"|global_steps?[^\w\n]{0,6}(\d+)"
    r"|\bstep:[ \t]?(\d+) - "
    r"|(kl_loss)[^\w\n]{0,6}[-+]?\d"
)
_STEP_MARKERS = ("Training Progress", "global_step", "step:", "kl_loss")
_ACTIVITY = re.compile(
    r"\brollout|\bevaluat|\bvalidat|\bval-core/|processed prompts|\bepisode"
    r"|\btasks?\b[^\n]{0,80}?\b(?:finished|done|completed|submitted)\b"
    r"|\d+%\|[^|\n]*\|\s*\d+/\d+",
    re.IGNORECASE,
)
_BUSY_ENGINE = re.compile(r"throughput: (?!0(?:\.0+)? )\d")
_TEARDOWN = re.compile(
    r"shut(?:ting)?[ _-]?down|\bexit|\bkill|terminat|\babort|\bstopp|\bfail|\berror|exception|\bdied\b|\bdead\b"
    r"|\bcrash|traceback|\bsignal|\bcancel|\bhang|\btimed? ?out\b|\bretr(?:y|ies|ying)\b|out of memory|\boom\b",
    re.IGNORECASE,
)
_MARKERS = ("rollout", "Rollout", "valid", "Valid", "evaluat", "Evaluat", "val-core/", "rocessed prompts", "%|",
            "INFO", "DEBUG", "SUCCESS", "task", "episode", "throughput", "Training Progress", "global_step",
            "step:", "kl_loss")


def may_show_progress(block: str) -> bool:
    """A cheap test on a '\\n'-joined block: False means no line of it can show progress."""
    return any(m in block for m in _MARKERS)


def _value(m: re.Match[str]) -> int:
    for group in m.groups()[:3]:
        if group is not None:
            return int(group)
    return NO_NUMBER


_VERL_STEP = re.compile(r"step:[ \t]?(\d+) - ")  # verl's console line starts with its step


def step_number(text: str) -> int | None:
    """The training step one line shows (the highest, `NO_NUMBER` for a step without a number), or None."""
    if (m := _VERL_STEP.match(text)) is not None:
        return int(m.group(1))
    values = [_value(m) for m in _STEP.finditer(text)]
    return max(values) if values else None


def may_show_steps(block: str) -> bool:
    """A cheap test on a '\\n'-joined block: False means no line of it shows a training step."""
    return any(m in block for m in _STEP_MARKERS)


def shows_activity(text: str) -> bool:
    """Rollout, evaluation or validation output, or an ordinary log record of the trainer — and not
    a line about a failure or the teardown after one."""
    if not text or text[0] in " \t":
        return False  # traceback frames, config dumps, help text
    if is_error_record(text) or is_warning_record(text) or _TEARDOWN.search(text):
        return False
    if "throughput:" in text:
        return _BUSY_ENGINE.search(text) is not None  # vLLM's stats: progress only while it generates
    return is_info_record(text) or _ACTIVITY.search(text) is not None
