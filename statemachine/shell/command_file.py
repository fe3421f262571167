"""The script an attempt runs: the launch command as the body of `logs/attempt-N.command.sh`.

One function for the worker that writes it and for `ajet-runner check`, which shows it, so what
`check` prints is byte for byte what would run.
"""

from __future__ import annotations

__all__ = ["COMMAND_FILE_HEADER", "command_script"]

COMMAND_FILE_HEADER = "# ajet-runner: the launch command of this attempt, run by bash from the wrapper beside it.\n"


def command_script(command: str) -> str:
    """The launch command as the body of a script, byte for byte (plus a final newline).

    A multi-line command stays multi-line: heredocs, `if`/`fi` and comments work as written.
    """
    return COMMAND_FILE_HEADER + command + ("" if command.endswith("\n") else "\n")
