"""The ssh executor (docs/executors.md#ssh): a run in a tmux server on a host reached by ssh, ssh being only
the control channel. `build(settings, host)` is what workers/executors/__init__.py calls."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.executors.protocol import Capabilities, ExecutorError
from ajet_runner.workers.executors.stub import StubExecutor

if TYPE_CHECKING:
    from ajet_runner.store.settings import Settings
    from ajet_runner.workers.executors.ssh.ssh_executor import SshExecutor


class NoRouteError(ExecutorError):
    """No host to run on: the launch fails with this, naming what to add (never runs anywhere else)."""

    host = ""


class NoRoute(StubExecutor):
    """The ssh executor when no host is known: every launch fails saying why; nothing runs."""

    def __init__(self, why: str) -> None:
        super().__init__()
        self.why = why

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(name="ssh", attach=False, local_pids=False, host_environment=True)

    def start(self, session: str, command: str, **_: Any) -> RunHandle:
        raise NoRouteError(self.why)


def build(settings: Settings, host: str | None) -> SshExecutor | NoRoute:
    """The executor for `host` (a blueprint's `exp_host`, or the one host a worker serves)."""
    from ajet_runner.workers.executors.ssh.ssh_executor import SshExecutor

    if not host:
        served = [h.strip() for h in (settings.hosts or "").split(",") if h.strip()]
        if len(served) != 1:
            return NoRoute("the ssh executor needs a host: the blueprint names none and this worker serves "
                           + (f"{len(served)} ({', '.join(served)})" if served else "none")
                           + ": add a login line (login: ssh HOST) to the blueprint, or start the worker with "
                           "--host HOST")
        host = served[0]
    return SshExecutor(host, config=settings.ssh_config, linger=settings.pane_linger_seconds,
                       unreachable_after=settings.ssh_unreachable_seconds)


def attach_line(settings: Settings, host: str, session: str) -> str:
    """What a person types to watch a run on `host` live (no connection is made here)."""
    import shlex

    from ajet_runner.statemachine.shell.ssh_login import parse_target
    from ajet_runner.workers.executors.ssh.host_scripts import tmux_socket

    target = parse_target(host)
    config = ["-F", settings.ssh_config] if settings.ssh_config else []
    words = ["ssh", *config, "-t", *target.ssh_args()[:-2], target.destination(), "tmux", "-L", tmux_socket(),
             "attach", "-t", f"={session}"]
    return " ".join(shlex.quote(w) for w in words)
