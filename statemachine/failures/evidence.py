"""Is a line that a catalogue entry matches evidence of that failure, or only a look-alike?

One decision, used by the scanner for every candidate line: live and after the exit alike, a
failure is decided only on a line that reports it (see lineshape.py). What the evidence still
needs while the process lives — no progress after it within the entry's settle — is the
diagnosis rule's part (rules/diagnosis.py).
"""

from __future__ import annotations

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
    if is_exception_line(text) and Shape.exception in sig.shapes:
        return Shape.exception
    if Shape.error_record in sig.shapes and is_error_record(text):
        return Shape.error_record
    if Shape.shell in sig.shapes and is_shell_report(text):
        return Shape.shell
    if Shape.line_start in sig.shapes and sig.starts(text):
        return Shape.line_start
    if Shape.warning_record in sig.shapes and is_warning_record(text):
        return Shape.warning_record
    return None


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
