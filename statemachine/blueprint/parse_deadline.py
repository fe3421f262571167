"""The CPU budget of one parse: a hostile text is refused unread, it never holds a submission thread.

The parsers that run on a request's text (the blueprint, its `[exp_sweep]` part) take an optional
deadline, an instant of the parsing thread's CPU clock (`after`), and call `check` between units of work
(a section, a line). CPU time, not the wall clock: on a busy machine a real blueprint waited for a core
for over a second and was refused as hostile (seen in `make test` at load 5.6); its parse is milliseconds
of CPU, a hostile one's is what the budget bounds. The deadline is made and checked in the same thread.
"""

from __future__ import annotations

import time

__all__ = ["ParseDeadline", "after", "check"]


class ParseDeadline(TimeoutError):
    """The parse took longer than the deadline it was given (see `parse_blueprint(deadline=...)`)."""


def after(seconds: float) -> float:
    """The deadline `seconds` of this thread's CPU time from now."""
    return time.thread_time() + seconds


def check(deadline: float | None, what: str = "the blueprint") -> None:
    """Raise ParseDeadline once `deadline` (from `after`, in this thread) has passed (None: no deadline)."""
    if deadline is not None and time.thread_time() > deadline:
        raise ParseDeadline(f"{what} took too long to parse")
