"""What Ray adds around AgentJet's TaskRunner actor, without starting Ray.

In a real run `ajet.backbone.main_verl` runs the trainer in a Ray actor (`TaskRunner`), so
everything the trainer prints reaches the driver's console through Ray's log forwarding,
each line prefixed `(TaskRunner pid=<pid>) ` (coloured when Ray colours prefixes), and an
exception in the actor comes back out of `ray.get` as
`ray.exceptions.RayTaskError(<Cause>): ray::TaskRunner.run() (pid=..., ip=..., ...)`.
Here the trainer runs in the driver process itself; `actor_output` prefixes its lines and
`raise_as_ray_task_error` builds the error with the REAL `ray.exceptions.RayTaskError`.
The prefix format is an emulation of Ray's, not produced by Ray here.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import traceback


class _PrefixingStream(io.TextIOBase):
    def __init__(self, target, prefix: str) -> None:
        self._target = target
        self._prefix = prefix
        self._at_line_start = True

    encoding = "utf-8"  # Ray's worker log files are UTF-8: tqdm draws its bar with block characters

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            if self._at_line_start:
                out.append(self._prefix)
            out.append(piece)
            self._at_line_start = piece.endswith("\n")
        self._target.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self._target.flush()

    def isatty(self) -> bool:
        return False  # Ray workers write to log files, not to a terminal

    def fileno(self) -> int:
        return self._target.fileno()


def _prefix(actor: str, pid: int) -> str:
    text = f"({actor} pid={pid})"
    colour = os.environ.get("RAY_COLOR_PREFIX")
    if colour == "1" or (colour is None and sys.stdout.isatty()):
        return f"\x1b[36m{text}\x1b[39m "
    return f"{text} "


@contextlib.contextmanager
def actor_output(actor: str = "TaskRunner", enabled: bool = True):
    """Within: stdout/stderr (and loguru's sink) carry the actor prefix."""
    if not enabled:
        yield
        return
    from ajet.utils.launch_utils import set_loguru_default_color

    prefix = _prefix(actor, os.getpid())
    old_out, old_err = sys.stdout, sys.stderr
    sys.stdout = _PrefixingStream(old_out, prefix)
    sys.stderr = _PrefixingStream(old_err, prefix)
    set_loguru_default_color()  # AgentJet's own loguru setup, now writing to the actor's stderr
    try:
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr = old_out, old_err
        set_loguru_default_color()


def ray_task_error(exc: BaseException, actor_repr: str = "<main_verl.TaskRunner object at 0x7f3a5c1e2d90>"):
    """The driver-side exception `ray.get(runner.run.remote(config))` raises for `exc`."""
    from ray.exceptions import RayTaskError

    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    err = RayTaskError(
        "TaskRunner.run",
        tb,
        exc,
        proctitle="ray::TaskRunner.run",
        pid=os.getpid(),
        ip=os.environ.get("AJET_CONF_RAY_IP", "127.0.0.1"),
        actor_repr=actor_repr,
        actor_id="ffffffffffffffff" + os.urandom(8).hex(),
    )
    return err.as_instanceof_cause()
