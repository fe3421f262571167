"""Has training started? The swarm skill's "first step success" check, for both modes.

A run counts as started once its log shows a training step: a `kl_loss` value, a
`Training Progress` bar past step 0, or a `global_step(s)` count ≥ 1. The timeout comes from
the `[exp_max_time]` text ("First step success timeout: 20 minutes", "首步超时 20 分钟"),
else the rule's default (20 minutes).
"""

from __future__ import annotations

import re

from ajet_runner.statemachine.durations import parse_duration

__all__ = ["DEFAULT_FIRST_STEP_SECONDS", "shows_training_step", "first_step_timeout_from_text",
           "without_first_step_clause", "first_step_clause"]

DEFAULT_FIRST_STEP_SECONDS = 20 * 60.0
_STEP = re.compile(
    r"kl_loss\W{0,6}[-+]?\d"
    r"|Training Progress[^\n]{0,60}?(?<![\d.])[1-9]\d*\s*/\s*\d+"
    r"|global_steps?\W{0,6}[1-9]\d*",
    re.IGNORECASE,
)
_TIMEOUT_TEXT = re.compile(
    r"(?:first[\s_-]*step(?:[\s_-]*success)?[\s_-]*timeout|首步(?:成功)?超时)\s*[:：=]?\s*([^\n;；,，]+)",
    re.IGNORECASE,
)


_STEP_WORDS = ("kl_loss", "training progress", "global_step")  # each alternative of _STEP holds one
_FOLD_EXCEPTIONS = ("\u0131", "\u0130")  # ı and İ match i under IGNORECASE, but casefold() keeps them


def shows_training_step(text: str) -> bool:
    """Whether `text` (log lines) shows at least one training step. The case-folded words first: a block
    without any (nearly every block) costs no regex search (the IGNORECASE alternation is ~8 µs per 450
    characters)."""
    folded = text.casefold()
    maybe = any(w in folded for w in _STEP_WORDS) or any(c in text for c in _FOLD_EXCEPTIONS)
    return maybe and _STEP.search(text) is not None


def first_step_timeout_from_text(text: str) -> float | None:
    """The first-step timeout stated in the `[exp_max_time]` text, in seconds, or None."""
    m = _TIMEOUT_TEXT.search(text or "")
    if m is None:
        return None
    secs = parse_duration(m.group(1))
    return secs if secs is not None and secs > 0 else None


def without_first_step_clause(text: str) -> str:
    """The `[exp_max_time]` text minus its first-step timeout clause, so the run's own limit
    is read from what remains ("12 hours. First step success timeout: 20 minutes" -> 12 h)."""
    return _TIMEOUT_TEXT.sub(" ", text or "")


def first_step_clause(text: str) -> str:
    """The first-step timeout clause of `text` as written, or ""."""
    m = _TIMEOUT_TEXT.search(text or "")
    return m.group(0).strip() if m else ""
