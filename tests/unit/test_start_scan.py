"""The start facts (experiment name, start step, resumed checkpoint) kept as the log streams by
(statemachine/logs/checkpoints.py StartScan, fed by the watch's LogScanner), so nothing at an attempt's end
reads the log again for them — a "not found" included (issue 39, item 1).

Real files read through AttemptWatch exactly as the driver reads them."""

from __future__ import annotations

import time
from pathlib import Path

from ajet_runner.statemachine.failures.diagnose import LogScanner
from ajet_runner.statemachine.logs.checkpoints import StartScan, parse_start
from ajet_runner.store.records import Attempt
from ajet_runner.workers.executors.handle import RunHandle
from ajet_runner.workers.repair.resume import keep_start_facts, note_start
from ajet_runner.workers.watching.watch import FINISH_BYTES, AttemptWatch

FILLER = b"(TaskRunner pid=1) INFO rollout: task 0042 finished with reward 1.0 in 12 turns\n" * 64
HEAD = (b"2026-01-29 17:41:34.123 | INFO     | ajet.utils.config_utils:prepare_experiment_config:285 - "
        b"Experiment Name: math_20260129_1741\n"
        b"Load from checkpoint folder: /c/saved/p/math_20260129_1741/global_step_4\n"
        b"Setting global step to 4\n")


def handle_for(log: Path) -> RunHandle:
    return RunHandle(session="s", log_path=log, rc_path=log.with_suffix(".rc"), pid_path=log.with_suffix(".pid"),
                     wrapper_path=log.with_suffix(".sh"), started_at=time.time())


def write(path: Path, head: bytes, megabytes: float) -> None:
    with path.open("wb") as f:
        f.write(head)
        for _ in range(int(megabytes * (1 << 20)) // len(FILLER) + 1):
            f.write(FILLER)


def watched_to_the_end(log: Path) -> AttemptWatch:
    watch = AttemptWatch(handle_for(log), None)
    watch.read_log(time.time())
    while watch.behind:
        watch.read_log(time.time())
    watch.finish_log(time.time())
    return watch


def test_the_facts_streamed_by_are_the_ones_a_reread_finds(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    write(log, HEAD, 2)
    watch = watched_to_the_end(log)
    scan = watch.scanner.start
    assert scan.settled and scan.facts == parse_start(HEAD.decode().splitlines())
    assert scan.facts.experiment_name == "math_20260129_1741" and scan.facts.start_step == 4
    assert scan.facts.resumed_from.endswith("global_step_4")


def test_a_log_without_agentjets_lines_is_settled_as_not_found_and_never_read_again(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    write(log, b"", 3)
    watch = watched_to_the_end(log)
    attempt = Attempt(number=1, started_at=0.0, log_path=str(log))
    keep_start_facts(attempt, watch.scanner.start)
    assert attempt.start_read is True and attempt.experiment_name == "" and attempt.start_step is None
    # Were the log read again, this line would be found: note_start must leave the attempt alone.
    log.write_bytes(HEAD)
    note_start(attempt)
    assert attempt.experiment_name == "" and attempt.start_step is None
    assert Attempt.model_validate(attempt.model_dump()).start_read is True  # kept in the record


def test_a_head_skipped_in_a_backlog_is_not_settled_so_the_log_is_read(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    write(log, b"", FINISH_BYTES / (1 << 20) + 4)  # more than an ended attempt reads before jumping to its tail
    with log.open("r+b") as f:
        f.write(HEAD)  # the facts at the very start; ended before anything was read
    watch = AttemptWatch(handle_for(log), None)
    watch.offset = len(HEAD) + 10  # as if a gap: the scanner never saw the head
    watch.scanner.skip_gap()
    watch.finish_log(time.time())
    attempt = Attempt(number=1, started_at=0.0, log_path=str(log))
    keep_start_facts(attempt, watch.scanner.start)
    assert not watch.scanner.start.settled and attempt.start_read is None
    note_start(attempt)
    assert attempt.experiment_name == "math_20260129_1741" and attempt.start_step == 4


def test_the_scan_survives_a_checkpoint_and_an_older_checkpoint_knows_nothing() -> None:
    scanner = LogScanner()
    scanner.feed(b"Experiment Name: a_1\nsome line\n")
    state = scanner.checkpoint()
    resumed = LogScanner.resume(state)
    resumed.feed(b"Training from scratch\n")
    assert resumed.start.settled and resumed.start.facts.experiment_name == "a_1"
    assert resumed.start.facts.start_step == 0
    older = dict(state)
    older.pop("start")
    from_old = LogScanner.resume(older)
    from_old.feed(FILLER)
    from_old.close()
    assert not from_old.start.settled  # the head went by before this scan existed: not a "not found"


def test_past_its_limit_the_scan_stops_looking_and_says_not_found() -> None:
    scan = StartScan(limit=1000)
    text = FILLER.decode()
    scan.feed(text, text.splitlines())
    assert scan.done and scan.settled and scan.facts.experiment_name == ""
    scan.feed("Experiment Name: too_late", ["Experiment Name: too_late"])
    assert scan.facts.experiment_name == ""


def test_reading_a_log_again_finds_what_a_line_by_line_parse_finds(tmp_path: Path) -> None:
    """The fallback for an attempt whose watch kept nothing (workers/repair/resume.py start_facts) maps the
    log and parses only the lines holding a phrase: the same facts as cleaning and parsing every line."""
    from ajet_runner.statemachine.logs.text import clean_line
    from ajet_runner.workers.repair.resume import start_facts

    log = tmp_path / "attempt-1.log"
    text = (FILLER
            + b"\x1b[32m2026-01-29 17:41:34\x1b[0m | \x1b[1mINFO    \x1b[0m | ajet.utils:prep:285 - "
              b"\x1b[1mExperiment Name: math_20260129_1741\x1b[0m\r\n"
            + FILLER
            + b"(TaskRunner pid=40211) Load from checkpoint folder: /c/saved/p/math_20260129_1741/global_step_4\n"
            + b"(TaskRunner pid=40211) progress 10%\rSetting global step to 4\n"
            + b"Experiment Name: a_later_one\nTraining from scratch\n" + FILLER)
    log.write_bytes(text)
    expected = parse_start(clean_line(x) for x in text.decode().split("\n"))
    assert start_facts(str(log)) == expected
    assert expected.experiment_name == "math_20260129_1741" and expected.start_step == 4
    assert expected.resumed_from.endswith("global_step_4")
    assert start_facts(str(log), limit=len(FILLER) + 10).experiment_name == ""  # past the head: not looked at
    (tmp_path / "empty.log").write_bytes(b"")
    assert start_facts(str(tmp_path / "empty.log")) == start_facts(str(tmp_path / "missing.log")) == parse_start([])


def test_after_a_skipped_backlog_only_the_log_past_what_the_watch_read_is_searched(tmp_path: Path) -> None:
    from ajet_runner.workers.repair.resume import start_facts

    log = tmp_path / "attempt-1.log"
    write(log, b"", 8)  # the facts come after 8 MiB: past what an ended attempt reads before its tail
    with log.open("ab") as f:
        f.write(HEAD)
        for _ in range(int(8 * (1 << 20)) // len(FILLER)):
            f.write(FILLER)
    watch = AttemptWatch(handle_for(log), None)
    watch.read_log(time.time(), max_bytes=1 << 20)
    watch.finish_log(time.time())  # at most FINISH_BYTES more, then a jump to the last MiB
    assert watch.unscanned and watch.unscanned[0]["start"] < 8 * (1 << 20) < watch.unscanned[0]["end"]
    attempt = Attempt(number=1, started_at=0.0, log_path=str(log), unscanned=list(watch.unscanned))
    keep_start_facts(attempt, watch.scanner.start)
    assert attempt.start_read is None and attempt.start_read_to == watch.unscanned[0]["start"]
    note_start(attempt)
    assert attempt.experiment_name == "math_20260129_1741" and attempt.start_step == 4

    decoy = tmp_path / "decoy.log"
    decoy.write_bytes(b"Experiment Name: seen_by_the_watch\n" + FILLER + b"Experiment Name: after_the_gap\n")
    assert start_facts(str(decoy), begin=40).experiment_name == "after_the_gap"
    assert start_facts(str(decoy)).experiment_name == "seen_by_the_watch"
