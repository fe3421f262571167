"""The tmux runner against a real tmux server (private socket) and real processes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from ajet_runner.workers.executors.local.procs import kill_marked, processes_with_marker
from ajet_runner.workers.executors.local.tmux import RunHandle, SessionExists, TmuxRunner, session_name

pytestmark = pytest.mark.integration
MARKER = "AJET_RUNNER_EXPERIMENT"


def wait_until(condition: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.02)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@pytest.fixture()
def runner(tmux_socket: str) -> TmuxRunner:
    return TmuxRunner(linger=60)  # socket from $AJET_RUNNER_TMUX_SOCKET, set by the fixture


class Attempt:
    """Paths of one attempt in a temporary result dir."""

    def __init__(self, root: Path, n: int) -> None:
        self.log = root / "logs" / f"attempt-{n}.log"
        self.rc = root / "logs" / f"attempt-{n}.rc"
        self.pid = root / "logs" / f"attempt-{n}.pid"

    def kw(self) -> dict[str, Path]:
        return {"log_path": self.log, "rc_path": self.rc, "pid_path": self.pid}


@pytest.fixture()
def attempt(tmp_path: Path) -> Iterator[Callable[[int], Attempt]]:
    yield lambda n: Attempt(tmp_path, n)


def test_runner_uses_the_private_socket(runner: TmuxRunner, tmux_socket: str) -> None:
    assert runner.socket_path == tmux_socket


def test_exit_codes_recorded_every_time(runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path) -> None:
    """tmux alone lost the exit status in 14 of 24 runs here; the wrapper must never."""
    quick = TmuxRunner(runner.socket_path, linger=0)
    for i in range(20):
        want = 3 if i % 2 else 0
        a = attempt(i)
        handle = quick.start(f"ajet_rc_{i}", f"echo run {i}; exit {want}", cwd=str(tmp_path), env={}, **a.kw())
        assert handle.pid is not None
        assert quick.wait_for_exit(handle, 10) == want, f"run {i}"
        assert not quick.is_running(handle)
        assert a.log.read_text() == f"run {i}\n"
    wait_until(lambda: quick.list_sessions("ajet_rc_") == [], what="sessions with linger=0 to close")


def test_killed_by_sigterm_is_143(runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path) -> None:
    handle = runner.start("ajet_term", "sleep 100", cwd=str(tmp_path), env={}, **attempt(1).kw())
    assert handle.pid is not None and runner.is_running(handle)
    assert runner.exit_code(handle) is None
    os.kill(handle.pid, signal.SIGTERM)
    assert runner.wait_for_exit(handle, 10) == 143
    assert not runner.is_running(handle)
    assert runner.exists("ajet_term")  # the pane lingers so a person can still look


def test_output_goes_to_log_and_pane(runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path) -> None:
    script = "import sys\nfor i in range(3):\n    print(f'out {i}')\n    print(f'err {i}', file=sys.stderr)\n"
    (tmp_path / "talk.py").write_text(script)
    a = attempt(1)
    a.log.parent.mkdir(parents=True)
    a.log.write_text("earlier attempt\n")  # appended to, never truncated
    handle = runner.start(
        "ajet_talk", f"{sys.executable} talk.py", cwd=str(tmp_path), env={"PYTHONUNBUFFERED": "1"}, **a.kw()
    )
    assert runner.wait_for_exit(handle, 10) == 0
    lines = a.log.read_text().splitlines()
    assert lines == ["earlier attempt", "out 0", "err 0", "out 1", "err 1", "out 2", "err 2"]
    wait_until(lambda: "exited with code 0" in runner.capture("ajet_talk"), what="the pane's last words")
    screen = runner.capture("ajet_talk")
    assert all(f"out {i}" in screen and f"err {i}" in screen for i in range(3))
    assert handle.wrapper_path == a.log.with_name("attempt-1.sh") and handle.wrapper_path.is_file()


def test_env_reaches_the_command(runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path) -> None:
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    fake = venv_bin / "python"
    fake.write_text('#!/bin/sh\necho "fake python from $VIRTUAL_ENV"\nexec sleep 30\n')
    fake.chmod(0o755)
    weird = """a 'b' "c" $HOME `x` \\ ; done"""
    env = {
        "PATH": f"{venv_bin}:{os.environ['PATH']}",
        "VIRTUAL_ENV": str(venv_bin.parent),
        MARKER: "exp-env-1",
        "WEIRD": weird,
    }
    a = attempt(1)
    command = 'echo "marker=$AJET_RUNNER_EXPERIMENT"; printf "%s\\n" "$WEIRD"; python'
    handle = runner.start("ajet_env", command, cwd=str(tmp_path), env=env, **a.kw())
    wait_until(lambda: "fake python" in a.log.read_text(), what="the fake python to run")
    assert a.log.read_text().splitlines() == ["marker=exp-env-1", weird, f"fake python from {venv_bin.parent}"]
    marked = {p.pid for p in processes_with_marker(MARKER, "exp-env-1")}
    assert handle.pid in marked
    assert runner.stop(handle, grace=2) == 130


def test_cd_export_chain(runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path) -> None:
    sub = tmp_path / "code base"
    sub.mkdir()
    a = attempt(1)
    handle = runner.start(
        "ajet_chain", "cd 'code base' && export A=1 && echo \"A=$A in $(pwd)\"", cwd=str(tmp_path), env={}, **a.kw()
    )
    assert runner.wait_for_exit(handle, 10) == 0
    assert a.log.read_text() == f"A=1 in {sub}\n"


TREE = textwrap.dedent(
    """
    import signal, subprocess, sys, time
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    bg = subprocess.Popen(["sleep", "1000"])                                    # background child
    mid = subprocess.Popen(["bash", "-c", "trap '' TERM; sleep 1001 & wait"])   # grandchild, TERM-proof parent
    escaped = subprocess.Popen(["sleep", "1002"], start_new_session=True)       # left our process group
    time.sleep(0.2)
    print("ready", bg.pid, mid.pid, escaped.pid, flush=True)
    while True:
        time.sleep(1)
    """
)


def test_stop_leaves_no_process_behind(runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path) -> None:
    (tmp_path / "tree.py").write_text(TREE)
    a = attempt(1)
    handle = runner.start("ajet_tree", f"{sys.executable} tree.py", cwd=str(tmp_path), env={}, **a.kw())
    wait_until(lambda: "ready" in a.log.read_text(), what="the tree to be built")
    assert handle.pid is not None and handle.pane_pid is not None
    leader = psutil.Process(handle.pid)
    wait_until(lambda: len(leader.children(recursive=True)) >= 4, what="the grandchild")
    seen = {handle.pid, handle.pane_pid}
    seen |= {p.pid for p in leader.children(recursive=True)}
    seen |= {p.pid for p in psutil.Process(handle.pane_pid).children(recursive=True)}  # tee
    seen |= {int(x) for x in re.findall(r"\d+", a.log.read_text())}
    assert len(seen) >= 7
    started = time.monotonic()
    rc = runner.stop(handle, grace=0.5)
    assert rc == 143  # SIGINT ignored, SIGTERM ended it
    assert time.monotonic() - started < 5  # ~1 s: grace 0.5 + TERM 0.5; the safety net alone takes 7 s
    assert [pid for pid in seen if not gone(pid)] == []
    assert not runner.exists("ajet_tree")
    assert not runner.is_running(handle)


def test_stop_graceful_and_idempotent(runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path) -> None:
    handle = runner.start("ajet_sigint", "sleep 100", cwd=str(tmp_path), env={}, **attempt(1).kw())
    started = time.monotonic()
    assert runner.stop(handle, grace=5) == 130  # SIGINT was enough
    assert time.monotonic() - started < 5
    assert runner.stop(handle, grace=1) == 130  # a second stop finds nothing left and says the same


def test_signals_to_the_wrapper_are_forwarded(
    runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path
) -> None:
    """A person's Ctrl-C in the pane, or killing the session, ends the job; the code is still recorded."""
    first = runner.start("ajet_ctrl_c", "sleep 100", cwd=str(tmp_path), env={}, **attempt(1).kw())
    assert first.pane_pid is not None
    os.kill(first.pane_pid, signal.SIGINT)
    assert runner.wait_for_exit(first, 10) == 130
    second = runner.start("ajet_hangup", "sleep 100", cwd=str(tmp_path), env={}, **attempt(2).kw())
    assert second.pid is not None
    runner.kill_session("ajet_hangup")
    assert runner.wait_for_exit(second, 10) == 129
    wait_until(lambda: gone(second.pid), what="the command to go with its session")  # type: ignore[arg-type]


def test_kill_marked_is_scoped(runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path) -> None:
    a = attempt(1)
    mark = f"exp-k-{os.getpid()}-{time.time_ns()}"
    command = "setsid nohup sleep 1000 > /dev/null 2>&1 & echo daemon=$!"
    handle = runner.start("ajet_daemon", command, cwd=str(tmp_path), env={MARKER: mark}, **a.kw())
    assert runner.wait_for_exit(handle, 10) == 0
    daemon = int(a.log.read_text().split("daemon=")[1])
    assert not gone(daemon) and psutil.Process(daemon).ppid() != handle.pane_pid  # escaped the tree
    unmarked_env = {k: v for k, v in os.environ.items() if k != MARKER}
    unmarked = subprocess.Popen(["sleep", "1001"], env=unmarked_env, start_new_session=True)
    other = subprocess.Popen(["sleep", "1002"], env={**unmarked_env, MARKER: "exp-other"}, start_new_session=True)
    try:
        assert [p.pid for p in processes_with_marker(MARKER, mark)] == [daemon]  # not the wrapper, tee
        assert kill_marked(MARKER, mark, grace=2) == [daemon]
        assert gone(daemon)
        assert unmarked.poll() is None and other.poll() is None
        assert kill_marked(MARKER, mark, grace=2) == []
    finally:
        for proc in (unmarked, other):
            proc.kill()
            proc.wait()


def test_kill_marked_never_kills_its_caller(tmp_path: Path) -> None:
    """Even when the worker itself carries the marker (started from a marked shell)."""
    mark = f"exp-self-{os.getpid()}-{time.time_ns()}"
    env = {**os.environ, MARKER: mark, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    code = (f"from ajet_runner.workers.executors.local.procs import kill_marked; "
            f"print(kill_marked('{MARKER}', '{mark}', 1))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_session_survives_the_runner_object(
    runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path
) -> None:
    """What re-adoption after a worker restart needs: the stored handle is enough."""
    handle = runner.start("ajet_adopt", "sleep 100", cwd=str(tmp_path), env={}, **attempt(1).kw())
    stored = json.dumps(handle.to_dict())
    del runner
    again = TmuxRunner()
    adopted = RunHandle.from_dict(json.loads(stored))
    assert adopted == handle
    assert again.exists("ajet_adopt") and "ajet_adopt" in again.list_sessions()
    assert again.is_running(adopted)
    impostor = RunHandle.from_dict({**json.loads(stored), "pid_create_time": adopted.pid_create_time - 100})
    assert not again.is_running(impostor)  # a reused pid is not our command
    assert again.stop(adopted, grace=2) == 130
    assert not again.is_running(adopted) and not again.exists("ajet_adopt")


def test_start_refuses_duplicates_and_missing_dirs(
    runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path
) -> None:
    handle = runner.start("ajet_once", "sleep 100", cwd=str(tmp_path), env={}, **attempt(1).kw())
    with pytest.raises(SessionExists):
        runner.start("ajet_once", "sleep 100", cwd=str(tmp_path), env={}, **attempt(2).kw())
    with pytest.raises(NotADirectoryError):
        runner.start("ajet_nodir", "true", cwd=str(tmp_path / "missing"), env={}, **attempt(3).kw())
    with pytest.raises(ValueError):
        runner.start("ajet_badenv", "true", cwd=str(tmp_path), env={"A-B": "1"}, **attempt(4).kw())
    assert runner.list_sessions() == ["ajet_once"]
    runner.stop(handle, grace=1)


def test_stop_escalates_to_sigkill(runner: TmuxRunner, attempt: Callable[[int], Attempt], tmp_path: Path) -> None:
    a = attempt(1)
    handle = runner.start(
        "ajet_stubborn", "trap '' INT TERM; echo armed; sleep 100 & wait", cwd=str(tmp_path), env={}, **a.kw()
    )
    wait_until(lambda: "armed" in a.log.read_text(), what="traps to be set")
    assert runner.stop(handle, grace=0.3) == 137


@pytest.mark.parametrize(
    "purpose",
    ["math top-k ablation", "v1.2: lr=1e-6 / bs 64", "数学推理 消融实验", "", "x" * 300, "café au lait"],
)
def test_session_names_are_tmux_safe(purpose: str, runner: TmuxRunner, tmp_path: Path) -> None:
    name = session_name(purpose, "3f2a9c5e-1b2c-4d5e-8f90-0123456789ab")
    assert re.fullmatch(r"ajet_[a-z0-9_]{1,40}_3f2a9c", name), name
    runner.server.new_session(session_name=name, window_command="sleep 30")
    assert runner.exists(name) and name in runner.list_sessions()  # tmux kept the name as is
    runner.kill_session(name)
    assert not runner.exists(name)


def test_session_name_rules() -> None:
    assert session_name("Math top-k ablation", "3f2a9c00") == "ajet_math_top_k_ablation_3f2a9c"
    assert session_name("数学推理", "3f2a9c00") == "ajet_exp_3f2a9c"
    assert session_name("café", "3f2a9c00") == "ajet_cafe_3f2a9c"
    named = session_name("run", "exp-2024-06-01.a")
    assert re.fullmatch(r"ajet_run_[0-9a-f]{6}", named)
    assert named == session_name("run", "exp-2024-06-01.a") != session_name("run", "exp-2024-06-01.b")
