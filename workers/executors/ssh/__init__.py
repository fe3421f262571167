"""The ssh executor (docs/executors.md#ssh): a run in a tmux server on a host reached by ssh, ssh being only
the control channel. `build(settings, host)` is what workers/executors/__init__.py calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ajet_runner.workers.executors.protocol import ExecutorError

if TYPE_CHECKING:
    from ajet_runner.store.settings import Settings
    from ajet_runner.workers.executors.ssh.executor import SshExecutor


def build(settings: Settings, host: str | None) -> SshExecutor:
    """The executor for `host` (a blueprint's `exp_host`, or the one host a worker serves)."""
    from ajet_runner.workers.executors.ssh.executor import SshExecutor

    if not host:
        served = [h.strip() for h in (settings.hosts or "").split(",") if h.strip()]
        if len(served) != 1:
            raise ExecutorError("the ssh executor needs a host: the blueprint names none"
                                + (f" and this worker serves {len(served)} ({', '.join(served)})" if served else ""))
        host = served[0]
    return SshExecutor(host, config=settings.ssh_config, linger=settings.pane_linger_seconds,
                       unreachable_after=settings.ssh_unreachable_seconds)


def attach_line(settings: Settings, host: str, session: str) -> str:
    """What a person types to watch a run on `host` live (no connection is made here)."""
    import shlex

    from ajet_runner.statemachine.ssh_login import parse_target
    from ajet_runner.workers.executors.ssh.host_scripts import tmux_socket

    target = parse_target(host)
    config = ["-F", settings.ssh_config] if settings.ssh_config else []
    words = ["ssh", *config, "-t", *target.ssh_args()[:-2], target.destination(), "tmux", "-L", tmux_socket(),
             "attach", "-t", f"={session}"]
    return " ".join(shlex.quote(w) for w in words)
