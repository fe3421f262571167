"""`ajet-runner up` started as a user starts it, for the tests that drive it: its lines collected as they come,
Ctrl-C at the end and, if that is not enough, its whole process group killed."""

from __future__ import annotations

import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ajet_runner.store.redis_server import free_port
from tests.integration.scenario import CLI, wait_for
from tests.integration.workers import kill_group


@dataclass
class Up:
    proc: subprocess.Popen[str]
    port: int
    workdir: Path
    lines: list[str] = field(default_factory=list)  # stdout, as printed
    errors: list[str] = field(default_factory=list)  # stderr, as printed

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def said(self) -> str:
        return "".join(self.lines)

    def token(self) -> str:
        return (self.workdir / "token").read_text().strip()

    def wait_line(self, prefix: str, timeout: float, what: str) -> str:
        """The first printed line that starts with `prefix`; fails with up's stderr if up ended first."""
        wait_for(lambda: self._line(prefix) or self.proc.poll() is not None, timeout, what)
        line = self._line(prefix)
        assert line is not None, f"up ended ({self.proc.returncode}) before {what}: {''.join(self.errors)[-3000:]}"
        return line

    def _line(self, prefix: str) -> str | None:
        return next((line for line in list(self.lines) if line.startswith(prefix)), None)


def _collect(stream: object, into: list[str]) -> None:
    into.extend(stream)  # type: ignore[call-overload]


@contextmanager
def running_up(workdir: Path, env: dict[str, str], *args: str, cwd: Path | None = None) -> Iterator[Up]:
    """`ajet-runner up --dir WORKDIR --port FREE ARGS…`, yielded once it printed its addresses (the line that
    starts with "Ctrl-C"). At the end: SIGINT, as a user's Ctrl-C, awaited up to 120 s (the demo's report is
    written then); the group is killed if it is still there."""
    port = free_port()
    proc = subprocess.Popen([*CLI, "up", "--dir", str(workdir), "--port", str(port), *args], env=env,
                            cwd=cwd or workdir.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    up = Up(proc, port, workdir)
    for stream, into in ((proc.stdout, up.lines), (proc.stderr, up.errors)):
        threading.Thread(target=_collect, args=(stream, into), daemon=True).start()
    try:
        up.wait_line("Ctrl-C", 90, "up to print its addresses")
        yield up
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        finally:
            if proc.poll() is None:
                kill_group(proc)  # type: ignore[arg-type]
