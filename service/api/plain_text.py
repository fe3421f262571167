"""Request text that must be plain: no NUL, no control character (a path with a NUL made os.path raise
ValueError, a plain-text 500; a line break in a name forges log lines). Refused by validation, so the
answer is the API's 422 with the field named, like every other bad value."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator

__all__ = ["PlainText", "control_problem"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def control_problem(value: str) -> str:
    """Why `value` is not plain text ('' when it is)."""
    m = _CONTROL.search(value)
    if m is None:
        return ""
    what = "a NUL byte" if m.group() == "\x00" else f"the control character {m.group()!r}"
    return f"holds {what} at character {m.start() + 1}; control characters are refused"


def _plain(value: str) -> str:
    if why := control_problem(value):
        raise ValueError(why)
    return value


PlainText = Annotated[str, AfterValidator(_plain)]
