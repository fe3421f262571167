"""Failure signatures: line cleaning, the catalogue, diagnosis of real-looking logs, the scanner."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ajet_runner.statemachine.failures.diagnose import (
    CATALOGUE,
    MAX_LINE_CHARS,
    LogScanner,
    clean_line,
    diagnose_lines,
    diagnose_text,
    signature,
)
from ajet_runner.statemachine.failures.signatures import load_catalogue, match_line
from ajet_runner.statemachine.logs.text import clean_lines
from ajet_runner.statemachine.models import Diagnosis
from tests.conftest import CORPUS
from tests.load import examples

LOGS = CORPUS / "logs"
E = "\x1b"

# ---- clean_line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        (f"{E}[36m(TaskRunner pid=40211){E}[0m Training step 3", "Training step 3"),
        ("(WorkerDict pid=41877, ip=10.0.0.1) INFO vllm ready", "INFO vllm ready"),
        (f"{E}[33m(WorkerDict pid=41877, ip=10.0.0.1){E}[0m {E}[1mhello{E}[22m", "hello"),
        ("(pid=123) bare pid prefix", "bare pid prefix"),
        ("(raylet) A worker died", "A worker died"),
        ("(raylet, ip=10.0.0.7) A worker died", "A worker died"),
        ("(autoscaler +1m2s) Adding 1 node", "Adding 1 node"),
        ("(TaskRunner pid=1) CUDA out of memory [repeated 3x across cluster]", "CUDA out of memory"),
        ("(not a ray prefix) keep me", "(not a ray prefix) keep me"),
        ("text (TaskRunner pid=1) in the middle", "text (TaskRunner pid=1) in the middle"),
        ("step  10%|█| 1/10\rstep  50%|█████| 5/10\rstep 100%|██████████| 10/10", "step 100%|██████████| 10/10"),
        ("last segment wins even when blank follows\r   \r", "last segment wins even when blank follows"),
        ("windows line\r", "windows line"),
        (f"{E}]8;;https://docs.ray.io{E}\\link{E}]8;;{E}\\ text", "link text"),
        (f"{E}]0;window title\x07after title", "after title"),
        (f"{E}[2K{E}[1Gerased and rewritten", "erased and rewritten"),
        (f"truncated escape at the end {E}[3", "truncated escape at the end 3"),
        ("nul\x00 and bell\x07 removed, tab\tkept", "nul and bell removed, tab\tkept"),
        ("trailing spaces   ", "trailing spaces"),
        ("", ""),
    ],
)
def test_clean_line(raw: str, clean: str) -> None:
    assert clean_line(raw) == clean


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(st.text())
def test_clean_line_never_raises_and_leaves_no_escapes(text: str) -> None:
    out = clean_line(text)
    assert "\x1b" not in out
    assert "\r" not in out


@settings(max_examples=examples(300), suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.text(), st.sampled_from([f"{E}[3", f"{E}]8;;x", "\r", "(pid=1) ", E, "\x9b"]))))
def test_block_cleaning_equals_line_by_line(lines: list[str]) -> None:
    lines = [line.replace("\n", " ") for line in lines]
    assert clean_lines(lines) == [clean_line(line) for line in lines]


# ---- the catalogue ------------------------------------------------------------------------

REQUIRED_IDS = {
    "cuda_oom", "vllm_kv_cache", "ray_already_running", "gpu_busy", "gpu_count_mismatch", "nccl_timeout",
    "nccl_unhandled_cuda_error", "network_unreachable", "missing_api_key", "execute_test_probe",
    "model_path_missing", "host_oom", "prompt_too_long", "subprocess_failed", "unexpected_error",
    "python_traceback",
}


def test_catalogue_has_the_required_signatures_with_consistent_plans() -> None:
    ids = [s.id for s in CATALOGUE]
    assert len(ids) == len(set(ids))
    assert set(ids) >= REQUIRED_IDS
    for sig in CATALOGUE:
        assert sig.explanation
        assert sig.repairable == bool(sig.repair), sig.id
        assert signature(sig.id) is sig
    assert not signature("model_path_missing").repairable
    assert not signature("python_traceback").repairable and signature("python_traceback").fatal
    generic = [s.id for s in CATALOGUE if s.generic]
    assert {"subprocess_failed", "unexpected_error", "python_traceback"} <= set(generic)
    # generic entries come last, so a line is always attributed to a specific entry first
    first_generic = min(i for i, s in enumerate(CATALOGUE) if s.generic)
    assert all(s.generic for s in CATALOGUE[first_generic:])


def test_plans_follow_the_notes() -> None:
    oom = {(a.kind, a.key): a for a in signature("cuda_oom").repair}
    assert oom[("set_env", "PYTORCH_CUDA_ALLOC_CONF")].value == "expandable_segments:True"
    assert oom[("set_yaml", "ajet.rollout.max_model_len")].factor == 0.75
    assert oom[("set_yaml", "ajet.data.train_batch_size")].factor == 0.5
    busy = [(a.kind, a.value) for a in signature("gpu_busy").repair]
    assert ("confine_gpus", None) in busy and ("cleanup", "gpu_processes") in busy
    assert signature("gpu_busy").transient is not None and signature("gpu_busy").transient.until == "gpus_free"
    net = signature("network_unreachable").repair
    assert net[0].kind == "prefix_command" and net[0].value == "proxychains4 -q" and net[0].requires == "proxychains4"
    assert ("set_env", "HF_HUB_OFFLINE", "1") in [(a.kind, a.key, a.value) for a in net]
    ray = signature("ray_already_running").repair  # the cleanup first, then reuse the running head
    assert [(a.kind, a.value, a.alternative) for a in ray] == [("cleanup", "ray", "ray_head"),
                                                              ("remove_flag", "--with-ray", "ray_head")]
    assert signature("network_unreachable").transient is not None and signature("ray_already_running").transient is None
    nvls = [(a.key, a.value) for a in signature("nccl_unhandled_cuda_error").repair if a.kind == "set_env"]
    assert nvls == [("NCCL_NVLS_ENABLE", "0")]
    assert all(a.kind != "set_env" for a in signature("nccl_timeout").repair)
    assert [(a.key, a.value) for a in signature("missing_api_key").repair] == [
        ("ajet.trainer_common.logger", "console")
    ]
    assert [(a.key, a.value) for a in signature("execute_test_probe").repair] == [("ajet.execute_test", False)]
    assert {a.key for a in signature("host_oom").repair} >= {"ajet.rollout.max_env_worker"}
    assert {a.key: a.factor for a in signature("prompt_too_long").repair} == {
        "ajet.data.max_prompt_length": 1.5,
        "ajet.data.max_response_length": 1.5,
    }


def test_each_finding_gets_its_own_copy_of_the_plan() -> None:
    first = signature("cuda_oom").finding(1, "x")
    first.repair[0].value = "tampered"
    assert signature("cuda_oom").finding(2, "y").repair[0].value == "expandable_segments:True"


def test_unknown_signature_is_a_clear_key_error() -> None:
    with pytest.raises(KeyError, match="no_such_thing"):
        signature("no_such_thing")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB", "cuda_oom"),
        ("RuntimeError: CUDA error: out of memory", "cuda_oom"),
        ("ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.", "host_oom"),
        ("Killed", "host_oom"),
        ("Unexpected error: SWANLAB_API_KEY is not set in the environment.", "missing_api_key"),
        ("wandb.errors.UsageError: api_key not configured (no-tty). call wandb.login(key=[your_api_key])",
         "missing_api_key"),
        ("swanlab: Error: 401 Unauthorized, please check your api key", "missing_api_key"),
        ("swanlab: step 401 uploaded", None),
        ("ValueError: Total available GPUs 2 is less than total desired GPUs 4.", "gpu_count_mismatch"),
        ("[TestProbe] Reward test failed: expected 1.0", "execute_test_probe"),
        ("Error running subprocess: Command '[x]' returned non-zero exit status 1.", "subprocess_failed"),
        ("requests.exceptions.ConnectTimeout: HTTPSConnectionPool(host='huggingface.co', port=443)",
         "network_unreachable"),
        ("WARNING retrying after ConnectTimeout", None),
        ("Training Progress:  50%|█████     | 10/20", None),
        ("Killed 3 stale sessions", None),
    ],
)
def test_match_line_attributes_to_the_first_matching_entry(line: str, expected: str | None) -> None:
    sig = match_line(line)
    assert (sig.id if sig else None) == expected


@pytest.mark.parametrize(
    ("yaml_text", "message"),
    [
        ("- {id: a, fatal: true, explanation: x, repairable: false, patterns: ['(']}", "bad pattern"),
        ("- {id: a, fatal: true, explanation: x, repairable: true, patterns: [a]}", "repairable"),
        (
            "- {id: python_traceback, fatal: true, explanation: x, repairable: false}\n"
            "- {id: python_traceback, fatal: true, explanation: x, repairable: false}",
            "duplicate",
        ),
        ("- {id: a, fatal: true, explanation: x, repairable: false, patterns: [a]}", "python_traceback"),
        ("{id: a}", "list"),
    ],
)
def test_a_bad_catalogue_is_refused(tmp_path: Path, yaml_text: str, message: str) -> None:
    path = tmp_path / "catalogue.yaml"
    path.write_text(yaml_text, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_catalogue(path)


# ---- the corpus: one realistic log per signature ------------------------------------------

# file -> (expected cause id or None, completed_run)
CORPUS_TABLE: dict[str, tuple[str | None, bool]] = {
    "cuda_oom_ray.log": ("cuda_oom", False),
    "swarm_unreachable.log": ("swarm_unreachable", False),
    "swarm_val_before_train.log": ("swarm_val_before_train", False),
    "swarm_mode_disabled.log": ("swarm_mode_disabled", False),
    "swarm_engine_state.log": ("swarm_engine_state", False),
    "swarm_config_missing.log": ("config_unreadable", False),
    "vllm_kv_cache.log": ("vllm_kv_cache", False),
    "vllm_gpu_busy.log": ("vllm_gpu_memory_busy", False),
    "ray_already_running.log": ("ray_already_running", False),
    "gpu_busy.log": ("gpu_busy", False),
    "gpu_count_mismatch.log": ("gpu_count_mismatch", False),
    "nccl_timeout.log": ("nccl_timeout", False),
    "nccl_unhandled_cuda_error.log": ("nccl_unhandled_cuda_error", False),
    "network_hf.log": ("network_unreachable", False),
    "swanlab_key_missing.log": ("missing_api_key", False),
    "execute_test_probe.log": ("execute_test_probe", False),
    "model_path_missing.log": ("model_path_missing", False),
    "host_oom_ray.log": ("host_oom", False),
    "zh_host_oom.log": ("host_oom", False),
    "python_module_missing.log": ("python_module_missing", False),
    "nvidia_smi_missing.log": ("nvidia_smi_missing", False),
    "backbone_env_mismatch.log": ("backbone_env_mismatch", False),
    "trinity_force_stop.log": ("trinity_force_stop", False),
    "prompt_too_long.log": ("prompt_too_long", False),
    "unknown_traceback.log": ("python_traceback", False),
    "subprocess_killed.log": ("subprocess_failed", False),
    "unexpected_error.log": ("unexpected_error", False),
    "slurm_preempted.log": ("preempted", False),  # the sim stopped by SIGTERM, then the SLURM executor's line
    "hang_no_error.log": (None, False),
    "success_actor_died.log": (None, True),
    "autokill_then_success.log": (None, True),
    "caught_traceback_then_success.log": (None, True),
}


def _read(name: str) -> str:
    # bytes, not read_text(): universal newlines would turn tqdm's \r redraws into lines
    return (LOGS / name).read_bytes().decode("utf-8")


def test_the_corpus_table_covers_every_file_and_every_specific_fatal_signature() -> None:
    assert set(CORPUS_TABLE) == {p.name for p in LOGS.glob("*.log")}
    causes = {cause for cause, _ in CORPUS_TABLE.values()}
    # pattern-less entries (swarm_server_died) come from a watch rule, never from a log line
    specific_fatal = {s.id for s in CATALOGUE if s.fatal and not s.generic and s.patterns}
    assert specific_fatal <= causes


@pytest.mark.parametrize("name", sorted(CORPUS_TABLE))
def test_corpus_log_diagnosis(name: str) -> None:
    expected_cause, expected_completed = CORPUS_TABLE[name]
    text = _read(name)
    diagnosis = diagnose_text(text)
    assert isinstance(diagnosis, Diagnosis)
    assert diagnosis.completed_run is expected_completed
    assert (diagnosis.cause.signature if diagnosis.cause else None) == expected_cause
    lines = text.removesuffix("\n").split("\n")
    assert diagnosis.line_count == len(lines)
    assert [f.line for f in diagnosis.findings] == sorted(f.line for f in diagnosis.findings)
    for finding in diagnosis.findings:  # line numbers point at the original log's line
        assert finding.text == clean_line(lines[finding.line - 1])[: len(finding.text)]
    if expected_completed:
        assert not any(f.fatal for f in diagnosis.findings)


@pytest.mark.parametrize("name", sorted(CORPUS_TABLE))
def test_scanner_byte_by_byte_equals_all_at_once(name: str) -> None:
    data = (LOGS / name).read_bytes()
    whole, trickle = LogScanner(), LogScanner()
    whole.feed(data)
    whole.close()
    for i in range(len(data)):
        trickle.feed(data[i : i + 1])
    trickle.close()
    assert trickle.findings == whole.findings == diagnose_text(data.decode()).findings
    assert trickle.line_count == whole.line_count
    assert trickle.completed_run == whole.completed_run
    assert trickle.tail(50) == whole.tail(50)


def test_cuda_oom_log_names_the_cause_over_the_launcher_symptom() -> None:
    diagnosis = diagnose_text(_read("cuda_oom_ray.log"))
    by_id = {f.signature: f for f in diagnosis.findings}
    assert by_id["cuda_oom"].fatal
    assert "CUDA out of memory" in by_id["cuda_oom"].text
    assert not by_id["subprocess_failed"].fatal
    assert "cuda_oom" in by_id["subprocess_failed"].explanation
    assert diagnosis.counts["cuda_oom"] == 2  # the actor's traceback and the driver's re-raise


def test_actor_died_after_the_final_metrics_is_not_a_failure() -> None:
    diagnosis = diagnose_text(_read("success_actor_died.log"))
    assert diagnosis.completed_run and diagnosis.cause is None
    died = next(f for f in diagnosis.findings if f.signature == "ray_actor_died")
    assert not died.fatal and "not a failure" in died.explanation
    assert died.line > (diagnosis.completed_line or 0)


def test_unknown_traceback_reports_its_final_exception_line() -> None:
    cause = diagnose_text(_read("unknown_traceback.log")).cause
    assert cause is not None and cause.signature == "python_traceback"
    assert cause.text == "omegaconf.errors.ConfigAttributeError: Key 'use_agentscope' is not in struct"
    assert not cause.repairable


# ---- diagnosis rules ----------------------------------------------------------------------

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def test_repeated_lines_are_one_finding_with_a_count() -> None:
    diagnosis = diagnose_lines([f"(WorkerDict pid={p}) {OOM}" for p in range(1000)])
    assert [f.signature for f in diagnosis.findings] == ["cuda_oom"]
    assert diagnosis.findings[0].line == 1
    assert diagnosis.counts == {"cuda_oom": 1000}


@pytest.mark.parametrize(
    ("last_line", "completed"),
    [
        ("(TaskRunner pid=1) Training Progress: 100%|██████████| 20/20 [2:00:00<00:00, 360.0s/it]", True),
        ("Training Progress:  95%|█████████▌| 19/20 [1:54:00<06:00, 360.0s/it]", False),
        ("Training Progress:  90%|█████████ | 18/20\rTraining Progress: 100%|██████████| 20/20", True),
        ("Final validation metrics: {'task_pass_rate@1': 0.5}", True),
        ("validation metrics at step 10: {'task_pass_rate@1': 0.5}", False),
    ],
)
def test_completion_markers(last_line: str, completed: bool) -> None:
    assert diagnose_lines(["starting", last_line]).completed_run is completed


def test_everything_fatal_is_demoted_once_the_run_completed() -> None:
    diagnosis = diagnose_lines([OOM, "Final validation metrics: {}", "Error running subprocess: Command "
                                "'[x]' returned non-zero exit status 1."])
    assert diagnosis.completed_run and diagnosis.cause is None
    assert [f.fatal for f in diagnosis.findings] == [False, False]
    assert "went on to complete" in diagnosis.findings[0].explanation


def test_generic_cause_when_nothing_specific_is_known() -> None:
    diagnosis = diagnose_lines(["Unexpected error: boom", "Error running subprocess: Command 'x' returned "
                                "non-zero exit status 1."])
    assert diagnosis.cause is not None and diagnosis.cause.signature == "unexpected_error"


def test_specific_cause_wins_even_when_a_symptom_comes_first() -> None:
    diagnosis = diagnose_lines([
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
        OOM,
    ])
    assert diagnosis.cause is not None and diagnosis.cause.signature == "cuda_oom"
    assert [f.signature for f in diagnosis.findings] == ["ray_actor_died", "cuda_oom"]


def test_chained_traceback_reports_the_last_exception() -> None:
    diagnosis = diagnose_lines([
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "KeyError: 'x'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        '  File "a.py", line 3, in f',
        "ValueError: bad config",
        "next log line",
    ])
    assert [(f.signature, f.line, f.text) for f in diagnosis.findings] == [
        ("python_traceback", 9, "ValueError: bad config")
    ]


def test_traceback_survives_interleaved_lines_and_ends_at_eof() -> None:
    lines = [
        "(TaskRunner pid=1) Traceback (most recent call last):",
        '(TaskRunner pid=1)   File "a.py", line 1, in f',
        "(WorkerDict pid=2) INFO 06-12 10:00:00 [loggers.py:118] Engine 000: throughput 0.0 tokens/s",
        "(TaskRunner pid=1) ray.exceptions.RayTaskError(RuntimeError): ray::TaskRunner.run() (pid=1)",
        '(TaskRunner pid=1)   File "b.py", line 2, in g',
        "(TaskRunner pid=1) RuntimeError: the real reason",
    ]
    scanner = LogScanner()
    for line in lines:
        scanner.feed((line + "\n").encode())
    assert scanner.findings == []  # the traceback may still go on
    closed = scanner.close()
    assert [(f.line, f.text) for f in closed] == [(6, "RuntimeError: the real reason")]
    assert scanner.cause is not None and scanner.cause.signature == "python_traceback"
    assert scanner.live_cause is None  # a generic symptom never stops a live run by itself


def test_a_traceback_explained_by_a_signature_is_not_reported_twice() -> None:
    diagnosis = diagnose_lines(["Traceback (most recent call last):", '  File "a.py", line 1', OOM, "done"])
    assert [f.signature for f in diagnosis.findings] == ["cuda_oom"]


# ---- the incremental scanner --------------------------------------------------------------


def test_scanner_reports_findings_as_they_arrive_with_original_line_numbers() -> None:
    scanner = LogScanner()
    assert scanner.feed(b"step 1\nstep 2\n(TaskRunner pid=1) ") == []
    new = scanner.feed(f"{OOM}\n".encode())
    assert [(f.signature, f.line, f.fatal) for f in new] == [("cuda_oom", 3, True)]
    assert scanner.cause is not None and scanner.live_cause == scanner.cause
    assert scanner.feed(f"{OOM}\n".encode()) == []
    assert scanner.counts == {"cuda_oom": 2}
    assert scanner.line_count == 4


def test_partial_utf8_sequences_across_chunks() -> None:
    data = "进度 50%\n已杀死\n".encode()
    scanner = LogScanner()
    for i in range(0, len(data), 2):  # splits every 3-byte character somewhere
        scanner.feed(data[i : i + 2])
    scanner.close()
    assert scanner.tail(5) == ["进度 50%", "已杀死"]
    assert scanner.cause is not None and scanner.cause.signature == "host_oom"


def test_invalid_bytes_are_replaced_not_fatal() -> None:
    scanner = LogScanner()
    scanner.feed(b"\xff\xfe garbage \xc3\n")
    scanner.close()
    assert scanner.tail(1) == ["\ufffd\ufffd garbage \ufffd"]


def test_last_line_without_newline_is_scanned_on_close() -> None:
    scanner = LogScanner()
    assert scanner.feed(b"ok\nKilled") == []
    assert [f.signature for f in scanner.close()] == ["host_oom"]
    assert scanner.line_count == 2
    assert scanner.close() == []
    with pytest.raises(ValueError):
        scanner.feed(b"more")


def test_tail_is_bounded_and_cleaned() -> None:
    scanner = LogScanner(tail_lines=3)
    scanner.feed(b"".join(f"{E}[31m(TaskRunner pid=1){E}[0m line {i}\n".encode() for i in range(10)))
    assert scanner.tail(2) == ["line 8", "line 9"]
    assert scanner.tail(100) == ["line 7", "line 8", "line 9"]
    assert scanner.tail(0) == []


def test_endless_progress_bar_without_newline_keeps_memory_bounded() -> None:
    scanner = LogScanner()
    tracemalloc.start()
    try:
        for i in range(100_000):  # ~8 MB of tqdm redraws, never a newline
            scanner.feed(f"\rTraining Progress: {i % 100:3d}%|█████     | {i}/100000 [00:00<00:00]".encode())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_LINE_CHARS * 4  # a few capped lines' worth, not the 8 MB fed
    scanner.feed(b"\rTraining Progress: 100%|##########| 100000/100000\n")
    assert scanner.completed_run and scanner.line_count == 1


def test_absurdly_long_line_is_capped_and_counting_continues() -> None:
    scanner = LogScanner()
    scanner.feed(b"x" * (3 * MAX_LINE_CHARS))
    scanner.feed(b"y" * (3 * MAX_LINE_CHARS) + f" {OOM}\n".encode())
    scanner.feed(f"{OOM}\n".encode())
    scanner.close()
    assert scanner.line_count == 2
    assert len(scanner.tail(2)[0]) == MAX_LINE_CHARS
    assert [(f.signature, f.line) for f in scanner.findings] == [("cuda_oom", 2)]


# ---- properties: never raise, chunking never changes the answer ---------------------------

FRAGMENTS = [
    "Traceback (most recent call last):", '  File "a.py", line 1, in f', "ValueError: x", "KeyError",
    "During handling of the above exception, another exception occurred:", "", "\r", f"{E}[31m", f"{E}[0m",
    "(TaskRunner pid=7) ", "(WorkerDict pid=8, ip=10.0.0.1) ", " [repeated 2x across cluster]", OOM, "Killed",
    "Final validation metrics: {}", "Training Progress: 100%|█| 3/3", "已杀死", "Error running subprocess: "
    "Command 'x' returned non-zero exit status 1.", "ActorDiedError", "\n", "\n", "\n",
]


def _state(scanner: LogScanner) -> tuple[object, ...]:
    return (scanner.findings, scanner.line_count, scanner.completed_run, scanner.counts, scanner.tail(20))


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.one_of(st.binary(max_size=2000), st.lists(st.sampled_from(FRAGMENTS)).map(lambda x: "".join(x).encode())),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=20),
)
def test_scanner_chunking_never_changes_the_result(data: bytes, cuts: list[int]) -> None:
    whole = LogScanner()
    whole.feed(data)
    whole.close()
    pieces = LogScanner()
    bounds = sorted({0, len(data), *(c for c in cuts if c <= len(data))})
    for start, end in zip(bounds, bounds[1:], strict=False):
        pieces.feed(data[start:end])
    pieces.close()
    assert _state(pieces) == _state(whole)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.lists(st.sampled_from(FRAGMENTS)).map("".join)))
def test_diagnose_text_never_raises_and_matches_the_scanner(text: str) -> None:
    diagnosis = diagnose_text(text)
    scanner = LogScanner()
    scanner.feed(text.encode("utf-8", errors="surrogatepass"))
    scanner.close()
    if not any("\ud800" <= ch <= "\udfff" for ch in text):
        assert diagnosis.findings == scanner.findings
        assert diagnosis.completed_run == scanner.completed_run
    if diagnosis.cause is not None:
        assert diagnosis.cause.fatal and not diagnosis.completed_run
