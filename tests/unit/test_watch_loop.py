"""The shared watch loop: lent runs ticked in one thread, on time, woken by an exit or a stop at once,
given back on request and with their errors raised in the lender's thread."""

from __future__ import annotations

import signal
import subprocess
import threading
import time

import psutil
import pytest

from ajet_runner.workers.drive.watch_loop import WatchLoop
from ajet_runner.workers.executors.exit_wait import ExitWaiter
from tests.load import scaled


def lend(loop: WatchLoop, tick, waiter: ExitWaiter, due: float) -> dict:
    """Lend from a thread of its own, as a driver does; what happened lands in the returned dict."""
    out: dict = {}

    def driver() -> None:
        try:
            loop.run(tick, waiter, due)
            out["returned"] = time.monotonic()
        except Exception as exc:  # noqa: BLE001 - the test looks at what was raised
            out["raised"] = exc

    out["thread"] = threading.Thread(target=driver)
    out["thread"].start()
    return out


def test_lent_runs_are_ticked_in_one_thread_on_their_due_times_and_come_back_when_they_say_so() -> None:
    loop = WatchLoop()
    seen: dict[int, list[tuple[str, float]]] = {0: [], 1: [], 2: []}
    waiters = [ExitWaiter() for _ in seen]

    def ticker(i: int):
        def tick() -> float | None:
            seen[i].append((threading.current_thread().name, time.monotonic()))
            return None if len(seen[i]) == 3 else time.monotonic() + 0.05
        return tick

    lent = [lend(loop, ticker(i), waiters[i], time.monotonic()) for i in seen]
    for x in lent:
        x["thread"].join(10)
        assert "returned" in x, x
    assert {name for ticks in seen.values() for name, _ in ticks} == {"watch-loop"}
    for ticks in seen.values():
        assert len(ticks) == 3
        gaps = [b[1] - a[1] for a, b in zip(ticks, ticks[1:], strict=False)]
        assert all(g >= 0.045 for g in gaps), gaps  # not before its due time
    assert loop.lent == 0
    for w in waiters:
        w.close()


def test_an_ended_process_wakes_its_lent_run_at_once() -> None:
    loop = WatchLoop()
    proc = subprocess.Popen(["sleep", "60"])
    waiter = ExitWaiter()
    waiter.watch(proc.pid, psutil.Process(proc.pid).create_time())
    assert waiter.watching
    ticks: list[float] = []

    def tick() -> float | None:
        ticks.append(time.monotonic())
        return None if waiter.process_alive() is False else time.monotonic() + 300  # next look: in 5 min
    out = lend(loop, tick, waiter, time.monotonic())
    deadline = time.monotonic() + scaled(10)
    while not ticks and time.monotonic() < deadline:
        time.sleep(0.01)
    killed = time.monotonic()
    proc.kill()
    proc.wait()
    out["thread"].join(10)
    assert "returned" in out
    assert out["returned"] - killed < 2.0  # the pidfd woke the loop, not the 5-minute due time
    waiter.close()


def test_a_wake_ticks_a_lent_run_before_its_due_time() -> None:
    loop = WatchLoop()
    waiter = ExitWaiter()
    stop = threading.Event()

    def tick() -> float | None:
        return None if stop.is_set() else time.monotonic() + 300
    out = lend(loop, tick, waiter, time.monotonic() + 300)
    deadline = time.monotonic() + scaled(10)
    while loop.lent == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    woke = time.monotonic()
    stop.set()
    waiter.wake()  # what the journal's stop request does
    out["thread"].join(10)
    assert out["returned"] - woke < 2.0
    waiter.close()


def test_an_error_in_a_lent_tick_is_raised_in_the_lenders_thread_and_the_others_go_on() -> None:
    loop = WatchLoop()
    w1, w2 = ExitWaiter(), ExitWaiter()
    count = {"n": 0}

    def bad() -> float | None:
        raise RuntimeError("the lease is gone")

    def good() -> float | None:
        count["n"] += 1
        return None if count["n"] == 5 else time.monotonic() + 0.02
    a = lend(loop, bad, w1, time.monotonic())
    b = lend(loop, good, w2, time.monotonic())
    for x in (a, b):
        x["thread"].join(10)
    assert isinstance(a.get("raised"), RuntimeError) and "lease" in str(a["raised"])
    assert "returned" in b and count["n"] == 5
    with pytest.raises(RuntimeError):
        loop.run(bad, w1, time.monotonic())  # the loop's thread survived: it takes runs again
    for w in (w1, w2):
        w.close()


class BrokenWaiter(ExitWaiter):
    """A waiter whose fds cannot be asked for: the loop itself fails while admitting it."""

    def fds(self) -> tuple[int, ...]:
        raise RuntimeError("no fds")


def test_a_loop_that_fails_hands_every_run_the_error_and_the_next_run_gets_a_new_loop() -> None:
    loop = WatchLoop()
    broken = BrokenWaiter()
    with pytest.raises(RuntimeError, match="no fds"):
        loop.run(lambda: time.monotonic() + 300, broken, time.monotonic())
    waiter = ExitWaiter()
    ticks: list[str] = []

    def tick() -> float | None:
        ticks.append(threading.current_thread().name)
        return None
    loop.run(tick, waiter, time.monotonic())  # a new loop thread took it
    assert ticks == ["watch-loop"]
    for w in (broken, waiter):
        ExitWaiter.close(w)


def test_a_lender_interrupted_while_waiting_withdraws_its_run_before_it_unwinds() -> None:
    """Ctrl-C in a driver on the main thread: KeyboardInterrupt reaches the lender's timed wait, and the
    run is back (never ticked again) before the exception leaves `run`."""
    loop = WatchLoop()
    waiter = ExitWaiter()
    ticks: list[float] = []

    def tick() -> float | None:
        ticks.append(time.monotonic())
        return time.monotonic() + 0.05
    timer = threading.Timer(0.3, lambda: signal.pthread_kill(threading.main_thread().ident, signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        loop.run(tick, waiter, time.monotonic())
    count = len(ticks)
    assert count >= 1 and loop.lent == 0 and not waiter.selected
    time.sleep(0.2)  # a window in which a run still held would have been ticked ~4 times
    assert len(ticks) == count
    waiter.close()
