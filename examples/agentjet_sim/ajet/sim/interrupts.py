"""SIGINT/SIGTERM turn into an exception raised at a safe point (between whole lines)."""

from __future__ import annotations

import signal
from types import FrameType


class Interrupted(BaseException):
    """Raised by the signal handler; exit code follows the shell convention 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def _handler(signum: int, _frame: FrameType | None) -> None:
    # Further signals during shutdown are ignored so the goodbye lines come out whole.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(signum)


def install() -> None:
    signal.signal(signal.SIGINT, _handler)
    signal.signal(signal.SIGTERM, _handler)
