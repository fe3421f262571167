"""Is a line that a catalogue entry matches evidence of that failure, or only a look-alike?

One decision, used by the scanner for every candidate line: live and after the exit alike, a
failure is decided only on a line that reports it (see lineshape.py). What the evidence still
needs while the process lives — no progress after it within the entry's settle — is the
diagnosis rule's part (rules/diagnosis.py).
"""

from __future__ import annotations

from collections.abc import Callable

from ajet_runner.statemachine.failures.signatures import Signature
from ajet_runner.statemachine.logs.lineshape import (
    Shape,
    announces_retry,
    is_error_record,
    is_exception_line,
    is_shell_report,
    is_warning_record,
)

__all__ = ["evidence_shape", "lookalike_note"]


def evidence_shape(sig: Signature, text: str, *, ends_traceback: bool = False, caught: bool = False) -> Shape | None:
    """The shape that makes `text` (a cleaned line `sig` matches) evidence, or None for a look-alike.

    `ends_traceback`: the scanner took the line as the exception line of an open traceback.
    `caught`: that traceback was introduced by a line announcing a retry (a logged, handled error).
    """
    if caught or sig.vetoed(text) or announces_retry(text):
        return None
    if ends_traceback and Shape.traceback_end in sig.shapes:
        return Shape.traceback_end
    line_tests: tuple[tuple[Shape, Callable[[str], bool]], ...] = (  # the first shape the entry allows that fits
        (Shape.exception, is_exception_line),
        (Shape.error_record, is_error_record),
        (Shape.shell, is_shell_report),
        (Shape.line_start, sig.starts),
        (Shape.warning_record, is_warning_record),
    )
    return next((shape for shape, fits in line_tests if shape in sig.shapes and fits(text)), None)


def lookalike_note(sig: Signature, text: str, *, caught: bool = False) -> str:
    """Why a matching line is not evidence, for the finding's explanation."""
    if caught:
        why = "it is part of a traceback logged while the error was retried"
    elif (veto := sig.veto_reason(text)) is not None:
        why = veto
    elif announces_retry(text):
        why = "the line says the error is being retried"
    else:
        why = "the line does not report an error (not an exception, a traceback's last line or an ERROR record)"
    return f"Not evidence of a failure: {why}."
