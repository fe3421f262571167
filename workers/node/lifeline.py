"""A process that must not outlive its parent: the node's watcher (a child of the node supervisor).

A supervisor killed with SIGKILL cannot stop its watcher: left alone it would live on with ppid 1,
keep taking jobs with a stale configuration and race the new supervisor's watcher.
`PR_SET_PDEATHSIG` has the kernel send SIGKILL to the child when its parent dies. The experiments
themselves run in tmux (not descendants), so they live on and are re-adopted by the next
supervisor once their driver's lease runs out.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PARENT_ENV = "AJET_RUNNER_PARENT_PID"
DEBUGGABLE_ENV = "AJET_RUNNER_DEBUGGABLE"


def die_with_parent(expected_parent: int | None = None, sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel for `sig` when the parent dies; True if armed (Linux only).

    If the parent is already gone (it died before this call), the process kills itself now:
    `expected_parent` is the pid it must still have as its parent.
    """
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG) failed: {os.strerror(err)}")
    if expected_parent and os.getppid() != expected_parent:
        os.kill(os.getpid(), sig)  # orphaned before the lifeline was armed
    return True


def expected_parent_from_env() -> int | None:
    value = os.environ.get(PARENT_ENV, "")
    return int(value) if value.isdigit() else None


def keep_environment_private() -> bool:
    """Make this process non-dumpable (Linux): its /proc/<pid>/environ, memory and ptrace are then root's only.

    The control plane's processes hold its keys in their environment (REDIS_URL with its password, the API
    token, the webhook secret); every experiment runs as the same Unix user and could read them there, which
    the cleaned job environment alone does not prevent. The flag is per process and reset by exec, so the
    experiments, tmux and every program started from here stay ordinary processes. AJET_RUNNER_DEBUGGABLE=1
    leaves it off (py-spy or gdb as the same user); True when set.
    """
    if not sys.platform.startswith("linux") or os.environ.get(DEBUGGABLE_ENV, "").strip() in ("1", "true", "yes"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
