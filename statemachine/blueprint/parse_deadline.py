"""The time budget of one parse: a hostile text is refused unread, it never holds a submission thread.

The parsers that run on a request's text (the blueprint, its `[exp_sweep]` part) take an optional
deadline, a `time.monotonic()` instant, and call `check` between units of work (a section, a line).
"""

from __future__ import annotations

import time

__all__ = ["ParseDeadline", "check"]


class ParseDeadline(TimeoutError):
    """The parse took longer than the deadline it was given (see `parse_blueprint(deadline=...)`)."""


def check(deadline: float | None, what: str = "the blueprint") -> None:
    """Raise ParseDeadline once `deadline` has passed (None: no deadline)."""
    if deadline is not None and time.monotonic() > deadline:
        raise ParseDeadline(f"{what} took too long to parse")
