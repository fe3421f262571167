"""Console validation metrics: the parser a worker, the report and `ajet-runner results LOGFILE` share."""

from __future__ import annotations

import pprint
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ajet_runner.statemachine.failures.diagnose import LogScanner
from ajet_runner.statemachine.logs.metrics import LogMetrics, merge_file_and_log, parse_log_lines, parse_log_text
from ajet_runner.statemachine.logs.results import parse_val_text
from tests.load import examples

RAY = "\x1b[36m(TaskRunner pid=40211)\x1b[0m "
INITIAL = ("Initial validation metrics: {'val-core/gsm8k/TGC@1': np.float64(0.31), "
           "'val-core/gsm8k/TGC@4': np.float64(0.52), 'val-core/gsm8k/reward/mean@4': 0.30, "
           "'val-aux/gsm8k/reward/std@4': np.float64(nan)}")
FINAL = ("Final validation metrics: {'val-core/gsm8k/TGC@1': np.float64(0.61), "
         "'val-core/gsm8k/TGC@4': np.float64(0.83), 'val-core/gsm8k/reward/mean@4': np.float64(0.6)}")


def console_log(initial: str = INITIAL, final: str = FINAL, wrap: bool = False) -> str:
    quote = pprint.pformat if wrap else (lambda x: x)
    lines = [f"{RAY}Total training steps: 20", *(RAY + ln for ln in quote(initial).splitlines())]
    lines += [f"{RAY}Training Progress:  50%|█████     | 10/20 [00:10<00:10,  1.0it/s]",
              f"{RAY}step:10 - actor/kl_loss:0.001 - val-core/gsm8k/TGC@1:0.5 - val-core/gsm8k/TGC@4:0.7",
              f"{RAY}Training Progress: 100%|██████████| 20/20 [00:20<00:00,  1.0it/s]"]
    lines += [RAY + ln for ln in quote(final).splitlines()]
    return "\n".join(lines) + "\n"


def test_initial_is_step_0_final_is_the_last_progress_step_tgc_reported_as_pass_rate() -> None:
    s = parse_log_text(console_log())
    assert [e.step for e in s.evaluations] == [0, 10, 20]
    first, _, last = s.evaluations
    assert first.metrics["task_pass_rate@1"] == 0.31 and first.metrics["val-core/gsm8k/TGC@1"] == 0.31
    assert first.metrics["mean_reward"] == 0.30  # val-core/<src>/reward/mean@k, original kept too
    assert last.metrics["task_pass_rate@4"] == 0.83 and last.metrics["val-core/gsm8k/TGC@4"] == 0.83
    assert s.final["step"] == 20 and s.baseline["step"] == 0 and s.format == "console"
    assert s.best["task_pass_rate@1"] == {"value": 0.61, "step": 20}


def test_pprint_quoted_and_wrapped_records_are_read() -> None:
    for wrap in (False, True):
        s = parse_log_text(console_log(wrap=wrap))
        assert [e.step for e in s.evaluations] == [0, 10, 20], wrap
    short = parse_log_text("'Final validation metrics: {\\'val-core/x/TGC@1\\': 0.5}'\n")
    assert short.evaluations[0].metrics["task_pass_rate@1"] == 0.5


def test_cut_records_are_skipped_not_invented() -> None:
    text = console_log().replace("'val-core/gsm8k/TGC@4': np.float64(0.83), 'val-core/gsm8k/reward/mean@4': "
                                 "np.float64(0.6)}", "'val-core/gsm8k/TGC@4': np.fl")
    s = parse_log_text(text)
    assert [e.step for e in s.evaluations] == [0, 10] and s.skipped == 1


def test_resumed_attempt_initial_takes_the_resumed_step() -> None:
    s = parse_log_text(f"{RAY}Setting global step to 8\n{RAY}{INITIAL}\n")
    assert [e.step for e in s.evaluations] == [8]


def test_a_record_that_names_its_step_keeps_it() -> None:
    s = parse_log_text("Final validation metrics: {'global_steps': 7, 'mean_reward': 0.4}\n")
    assert [(e.step, e.metrics) for e in s.evaluations] == [(7, {"mean_reward": 0.4})]


def test_file_wins_and_the_log_fills_missing_steps() -> None:
    file = parse_val_text("{'global_steps': 0, 'mean_reward': 0.1, 'target_dataset_name': 'main'}\n"
                          "{'global_steps': 10, 'mean_reward': 0.2, 'target_dataset_name': 'main'}\n")
    merged = merge_file_and_log(file, parse_log_text(console_log()))
    by_step = {e.step: e for e in merged.evaluations}
    assert sorted(by_step) == [0, 10, 20]
    assert by_step[0].metrics == {"mean_reward": 0.1} and by_step[10].metrics == {"mean_reward": 0.2}
    assert by_step[20].dataset == "main" and by_step[20].metrics["task_pass_rate@1"] == 0.61
    assert merged.final["step"] == 20 and merged.primary_dataset == "main"


def test_the_log_scanner_feeds_the_same_parser_while_tailing_bytes() -> None:
    metrics = LogMetrics()
    scanner = LogScanner(metrics=metrics)
    data = console_log(wrap=True).encode()
    for i in range(0, len(data), 7):  # arbitrary chunk boundaries, mid-line and mid-character
        scanner.feed(data[i : i + 7])
    scanner.close()
    assert sorted(metrics.evaluations) == [0, 10, 20]
    assert parse_log_lines(console_log().splitlines(keepends=True)).final["step"] == 20


_JUNK = st.text(alphabet=st.sampled_from(list("{}()'\"\\:,. -_/@0123456789naTGCfinvalidtrsmecpxyz\n\r\x1b[")),
                max_size=400)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_JUNK, st.sampled_from([INITIAL, FINAL, "Training Progress: |3/9", "('Final "
                                                  "validation metrics: {", " 'x': 1}')", "step:3 - val-core/a:1"])),
                max_size=30))
def test_fuzz_never_raises(parts: list[str]) -> None:
    s = parse_log_text("\n".join(parts))
    assert all(isinstance(e.step, int) for e in s.evaluations)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["{", "('Initial validation metrics: {", "Initial validation metrics: {'a': ",
                        "step:1 - val-core/x:", "'", "Training Progress: |"]),
       st.sampled_from(["'a': 1, ", "x" * 50, " '{'", "np.float64(", "\n 'k': 2, ", "'v%d': np.float64(0.5), "]),
       st.sampled_from(["", "}", "}')", "0.5}"]))
def test_fuzz_inputs_up_to_100_kb_parse_within_100_ms(prefix: str, unit: str, end: str) -> None:
    body = unit * (100_000 // len(unit))
    if "%d" in unit:
        body = "".join(unit % i for i in range(100_000 // len(unit)))
    text = (prefix + body)[: 100_000 - len(end)] + end
    best = min(_timed(text) for _ in range(3))  # the machine is shared: the best of three
    assert best < 0.1, f"{best:.3f}s for {len(text)} chars"


def _timed(text: str) -> float:
    t0 = time.perf_counter()
    parse_log_text(text)
    return time.perf_counter() - t0
