"""Bounded watch slices, the scanner checkpoint, per-signature settle, and the exit waiter.

Real files, real processes: a multi-MiB log is written to disk and read through AttemptWatch
exactly as the driver does; the exit waiter watches a real child process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ajet_runner.statemachine.failures.diagnose import LogScanner
from ajet_runner.statemachine.logs.metrics import LogMetrics
from ajet_runner.statemachine.models import Finding
from ajet_runner.statemachine.rules import DiagnosisRule, Observation
from ajet_runner.workers.executors.exit_wait import ExitWaiter
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.watching import scan_checkpoint
from ajet_runner.workers.watching.watch import FINISH_TAIL, SLICE_BYTES, AttemptWatch

CORPUS = Path(__file__).parents[1] / "corpus" / "logs"
FILLER = ("(TaskRunner pid=1) INFO rollout: task 0042 finished with reward 1.0 in 12 turns ü\n" * 50).encode()


def handle_for(log: Path) -> RunHandle:
    return RunHandle(session="s", log_path=log, rc_path=log.with_suffix(".rc"), pid_path=log.with_suffix(".pid"),
                     wrapper_path=log.with_suffix(".sh"), started_at=time.time())


def write_log(path: Path, megabytes: int, end: bytes = b"") -> None:
    with path.open("wb") as f:
        for _ in range(megabytes * (1 << 20) // len(FILLER) + 1):
            f.write(FILLER)
        f.write(end)


def scan_whole(data: bytes) -> LogScanner:
    scanner = LogScanner(metrics=LogMetrics())
    scanner.feed(data)
    scanner.close()
    return scanner


# -- bounded slices --------------------------------------------------------------------------

def test_one_read_takes_at_most_a_slice_and_says_more_is_waiting(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    write_log(log, 12)
    watch = AttemptWatch(handle_for(log), None)
    watch.read_log(time.time())
    assert 0 < watch.offset <= SLICE_BYTES and watch.behind
    passes = 1
    while watch.behind:
        watch.read_log(time.time())
        passes += 1
    assert watch.offset == log.stat().st_size and passes >= 3


def test_an_ended_attempt_with_a_huge_backlog_jumps_to_its_end_and_still_finds_the_cause(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    oom = (CORPUS / "cuda_oom_ray.log").read_bytes()
    write_log(log, 80, end=b"\n" + oom)
    watch = AttemptWatch(handle_for(log), None)
    t0 = time.monotonic()
    watch.finish_log(time.time())
    assert time.monotonic() - t0 < 10  # bounded: it did not scan the whole 80 MiB backlog first
    assert watch.skipped_bytes > 0 and watch.offset == log.stat().st_size
    assert watch.scanner.cause is not None and watch.scanner.cause.signature == "cuda_oom"
    (gap,) = watch.unscanned  # named: where, how much, why
    assert gap["end"] == log.stat().st_size - FINISH_TAIL and gap["bytes"] == gap["end"] - gap["start"] > 0
    assert "not yet scanned" in gap["reason"]


# -- checkpoint ----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cuda_oom_ray.log", "success_actor_died.log", "caught_traceback_then_success.log",
                                  "nccl_timeout.log"])
def test_a_resumed_scan_ends_exactly_like_one_pass(name: str) -> None:
    data = (CORPUS / name).read_bytes() + "\nünïcode tail ✓\n".encode()
    whole = scan_whole(data)
    for cut in (len(data) // 3, len(data) // 2 + 1, len(data) - 5):
        first = LogScanner(metrics=LogMetrics())
        first.feed(data[:cut])
        state = json.loads(json.dumps(first.checkpoint()))  # it travels as JSON
        second = LogScanner.resume(state)
        second.feed(data[cut:])
        second.close()
        assert second.diagnosis() == whole.diagnosis()
        assert second.tail(200) == whole.tail(200)
        assert second.metrics is not None and whole.metrics is not None
        assert second.metrics.summary().evaluations == whole.metrics.summary().evaluations
        assert second.last_step_line == whole.last_step_line


def test_a_broken_checkpoint_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="checkpoint"):
        LogScanner.resume({"v": 999})
    state = LogScanner().checkpoint()
    del state["findings"]
    with pytest.raises(ValueError, match="findings"):
        LogScanner.resume(state)


def test_an_adopting_watch_resumes_from_the_saved_offset_and_not_from_byte_0(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    write_log(log, 6)
    first = AttemptWatch(handle_for(log), None)
    while first.offset < 5 << 20:
        first.read_log(time.time())
    assert first.maybe_save(time.monotonic(), force=True)
    saved_at = first.offset
    with log.open("ab") as f:
        f.write((CORPUS / "host_oom_ray.log").read_bytes())
    second = AttemptWatch(handle_for(log), None)
    assert second.resume() and second.offset == saved_at and second.bytes_read == saved_at
    size = log.stat().st_size
    for _ in range(1000):  # a slice is time-bounded (0.25 s): under load one tick reads less than the rest
        second.read_log(time.time())
        if second.offset >= size:
            break
    assert second.offset == size and not second.behind
    assert second.bytes_read == size  # the saved part was not read again
    second.finish_log(time.time())
    assert second.scanner.cause is not None and second.scanner.cause.signature == "host_oom"
    one_pass = scan_whole(log.read_bytes())
    assert second.scanner.diagnosis() == one_pass.diagnosis()


def test_a_checkpoint_of_another_or_truncated_log_is_ignored(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    write_log(log, 1)
    watch = AttemptWatch(handle_for(log), None)
    watch.read_log(time.time())
    assert watch.maybe_save(time.monotonic(), force=True)
    log.write_bytes(b"short\n")  # truncated: same inode, smaller than the saved offset
    assert scan_checkpoint.load(log) is None and not AttemptWatch(handle_for(log), None).resume()
    log.unlink()
    log.write_bytes(b"another run's log\n" * 100_000)  # a new file under the same name (maybe the same inode)
    assert scan_checkpoint.load(log) is None
    other = tmp_path / "other.log"
    other.write_bytes(b"x\n")
    assert scan_checkpoint.load(other) is None


# -- fatal lines in live processes ----------------------------------------------------------

def obs(**kw: object) -> Observation:
    base: dict[str, object] = dict(now=100.0, started_at=0.0, attempt_started_at=0.0, max_seconds=None,
                                   process_alive=True)
    base.update(kw)
    return Observation(**base)  # type: ignore[arg-type]


def test_settle_is_a_property_of_the_signature() -> None:
    rule = DiagnosisRule(settle_seconds=8.0)
    oom = Finding(signature="cuda_oom", fatal=True, line=3, text="OOM", explanation="x")
    nccl = Finding(signature="nccl_timeout", fatal=True, line=3, text="t", explanation="x")
    assert rule.settle_for("cuda_oom") == 5.0 and rule.settle_for("nccl_timeout") == 8.0
    assert rule.check(obs(cause=oom, cause_seen_at=96.0)) is None
    assert rule.check(obs(cause=oom, cause_seen_at=94.9)) is not None
    assert rule.check(obs(cause=nccl, cause_seen_at=94.9)) is None
    assert rule.check(obs(cause=nccl, cause_seen_at=91.9)) is not None
    assert rule.check(obs(cause=oom, cause_seen_at=0.0, progress_after_cause=True)) is None


def test_training_steps_after_a_fatal_line_mean_it_did_not_kill_the_run() -> None:
    oom = (CORPUS / "host_oom_ray.log").read_text()
    scanner = LogScanner()
    scanner.feed(oom.encode())
    assert scanner.live_cause is not None and not scanner.progress_after_cause
    scanner.feed(b"\n(TaskRunner pid=1) Training Progress:  25%|##        | 5/20 [30:00<90:00]\n")
    assert scanner.live_cause is not None  # the bar redrawn at the step it had reached (tqdm at exit): no progress
    scanner.feed(b"(TaskRunner pid=1) Training Progress:  30%|###       | 6/20 [36:00<84:00]\n")
    assert scanner.live_cause is None and scanner.cause is None  # the step that followed cleared it
    host_oom = next(f for f in scanner.findings if f.signature == "host_oom")
    assert not host_oom.fatal and "went on" in host_oom.explanation
    done = LogScanner()
    done.feed((CORPUS / "success_actor_died.log").read_bytes())  # ActorDiedError after Final validation metrics
    assert done.completed_run and done.live_cause is None


# -- exit waiter ----------------------------------------------------------------------------

def test_the_waiter_wakes_when_the_process_ends_not_at_the_timeout() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    try:
        import psutil
        waiter = ExitWaiter()
        waiter.watch(proc.pid, psutil.Process(proc.pid).create_time())
        assert waiter.watching
        t0 = time.monotonic()
        woke = waiter.wait(10.0)
        took = time.monotonic() - t0
        assert woke and took < 3.0
        waiter.close()
    finally:
        proc.wait(10)


def test_the_waiter_ignores_a_pid_that_is_not_the_process_started_then() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        waiter = ExitWaiter()
        waiter.watch(proc.pid, 12345.0)  # another create time: a reused pid
        assert not waiter.watching
        t0 = time.monotonic()
        assert not waiter.wait(0.2) and time.monotonic() - t0 >= 0.19
        threading.Timer(0.1, waiter.wake).start()
        assert waiter.wait(10.0)
        waiter.close()
    finally:
        proc.kill()
        proc.wait(10)


def test_a_live_log_far_ahead_of_the_scanner_is_read_whole_slice_by_slice(tmp_path: Path) -> None:
    """No byte of a live log is skipped, however far ahead the writer is: a fatal line in the middle
    of the backlog is found, and the rules could run between the slices."""
    log = tmp_path / "attempt-1.log"
    write_log(log, 12, end=b"\n" + (CORPUS / "host_oom_ray.log").read_bytes())
    noise = b"(TaskRunner pid=1) kv 0042 1.0 12 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n" * 50  # not progress
    with log.open("ab") as f:
        for _ in range(12 * (1 << 20) // len(noise)):
            f.write(noise)
    watch = AttemptWatch(handle_for(log), None)
    passes = 0
    while True:
        watch.read_log(time.time())
        passes += 1
        if not watch.behind:
            break
    assert watch.offset == log.stat().st_size and passes >= 6 and watch.skipped_bytes == 0
    assert watch.unscanned == []
    assert watch.scanner.live_cause is not None and watch.scanner.live_cause.signature == "host_oom"


def test_the_checkpoint_is_saved_every_few_mb_under_a_fast_writer(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    write_log(log, 24)
    watch = AttemptWatch(handle_for(log), None)
    mono = time.monotonic()  # the clock stands still: only the bytes read make a save due
    assert watch.maybe_save(mono, force=True)
    worst = 0
    while True:
        watch.read_log(time.time())
        watch.maybe_save(mono)
        worst = max(worst, watch.offset - json.loads(scan_checkpoint.checkpoint_path(log).read_text())["offset"])
        if not watch.behind:
            break
    assert worst <= scan_checkpoint.SAVE_BYTES + SLICE_BYTES
    assert json.loads(scan_checkpoint.checkpoint_path(log).read_text())["offset"] >= log.stat().st_size - (
        scan_checkpoint.SAVE_BYTES + SLICE_BYTES)


def test_an_unscanned_range_survives_a_checkpoint(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    write_log(log, 3)
    first = AttemptWatch(handle_for(log), None)
    first.read_log(time.time(), max_bytes=1 << 20)
    first._jump(2 << 20, "a test gap")
    assert first.maybe_save(time.monotonic(), force=True)
    second = AttemptWatch(handle_for(log), None)
    assert second.resume()
    assert second.unscanned == [{"start": first.unscanned[0]["start"], "end": 2 << 20,
                                 "bytes": (2 << 20) - first.unscanned[0]["start"], "reason": "a test gap"}]


def test_console_evaluations_kept_at_an_attempts_end_are_used_instead_of_its_log(tmp_path: Path) -> None:
    from ajet_runner.workers.watching.watch import CONSOLE_KEY, attempt_evaluations

    log = tmp_path / "attempt-1.log"
    log.write_bytes((CORPUS / "success_actor_died.log").read_bytes())
    watch = AttemptWatch(handle_for(log), None)
    watch.read_log(time.time())
    watch.finish_log(time.time())
    kept = watch.console_evaluations()
    assert kept, "the corpus log has console validation lines"
    parsed = attempt_evaluations([{"number": 1, "log_path": str(log)}])  # an older record: parsed from the log
    assert [e.model_dump(mode="json") for e in parsed] == kept
    log.write_bytes(b"rotated away\n")  # the kept list is used, the log is not read again
    again = attempt_evaluations([{"number": 1, "log_path": str(log), CONSOLE_KEY: json.loads(json.dumps(kept))}])
    assert [e.model_dump(mode="json") for e in again] == kept


def test_the_pidfd_says_whether_the_process_runs_without_asking_proc() -> None:
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    waiter = ExitWaiter()
    try:
        assert waiter.process_alive() is None  # nothing watched: the caller asks psutil
        waiter.watch(proc.pid, psutil.Process(proc.pid).create_time())
        assert waiter.process_alive() is True
        proc.kill()
        proc.wait(10)  # reaped; a zombie reads the same (the pidfd is readable once it exits)
        assert waiter.process_alive() is False
    finally:
        waiter.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_the_log_stays_open_between_reads_and_a_replaced_log_is_opened_again(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    log.write_bytes(b"first line\n")
    watch = AttemptWatch(handle_for(log), None)
    watch.read_log(time.time())
    held = watch._log
    assert held is not None and not held.closed and watch.scanner.tail(5) == ["first line"]
    with log.open("ab") as f:
        f.write(b"second line\n")
    watch.read_log(time.time())
    assert watch._log is held and watch.scanner.tail(5) == ["first line", "second line"]
    replaced = tmp_path / "new.log"
    replaced.write_bytes(b"0123456789012345678901\nthird line\n")  # longer than what was read
    replaced.rename(log)  # another inode under the same name
    watch.read_log(time.time())
    assert held.closed and watch._log is not held
    assert watch.scanner.tail(1) == ["third line"]  # read on from the offset, in the new file
    watch.close()
    assert watch._log is None
