"""A failing verdict needs evidence: line shapes, progress lines, the catalogue's benign look-alikes,
and the diagnosis rule confirming (or not) a fatal line while the process lives."""

from __future__ import annotations

from pathlib import Path

import pytest

from ajet_runner.statemachine.failures.diagnose import CATALOGUE, LogScanner, diagnose_lines, signature
from ajet_runner.statemachine.failures.evidence import evidence_shape
from ajet_runner.statemachine.failures.signatures import load_catalogue
from ajet_runner.statemachine.logs import lineshape
from ajet_runner.statemachine.logs.lineshape import Shape
from ajet_runner.statemachine.logs.progress_lines import NO_NUMBER, shows_activity, step_number
from ajet_runner.statemachine.rules import DiagnosisRule, Observation

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
LOGURU_ERROR = "2025-06-12 10:41:07.118 | ERROR    | ajet.utils.launch_utils:execute_training_process:253 - "


# ---- line shapes ---------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("line", "exception"),
    [
        (OOM, True),
        ("RuntimeError: CUDA error: out of memory", True),
        ("ray.exceptions.RayTaskError(OutOfMemoryError): ray::TaskRunner.run() (pid=1)", True),
        ("requests.exceptions.ConnectTimeout: HTTPSConnectionPool(host='huggingface.co', port=443)", True),
        ("huggingface_hub.errors.LocalEntryNotFoundError: An error happened", True),
        ("socket.gaierror: [Errno -2] Name or service not known", True),
        ("KeyboardInterrupt", True),
        ("Exception: boom", True),
        ("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (to avoid CUDA out of memory)", False),
        ("WARNING: CUDA out of memory during log-prob computation, retrying", False),
        ("UserWarning: CUDA out of memory may happen with this batch size", False),
        ("Note: CUDA out of memory is avoided with expandable segments", False),
        ("oom_action: error  # CUDA out of memory", False),
        ("Error: CUDA out of memory", False),
        ("  torch.OutOfMemoryError: indented, inside a config dump", False),
    ],
)
def test_exception_lines(line: str, exception: bool) -> None:
    assert lineshape.is_exception_line(line) is exception


@pytest.mark.parametrize(
    ("line", "error", "warning", "info"),
    [
        (LOGURU_ERROR + "Error running subprocess: x", True, False, False),
        ("2026-12-01 01:41:33 | ERROR    | ajet.swarm_server - Please enable_swarm_mode", True, False, False),
        ("ERROR 06-12 10:04:02 [core.py:83] EngineCore failed to start.", True, False, False),
        ("ERROR explorer.py:188 Explorer failed: rollout engine unreachable", True, False, False),
        ("ERROR:root:boom", True, False, False),
        ("2025-06-12 10:03:19,004\tERROR worker.py:1832 -- boom", True, False, False),
        ("[2025-06-12 11:12:31,602 E 39877 39877] (raylet) node_manager.cc:3219: killed", True, False, False),
        ("[rank3]:[E612 11:02:41.507322139 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught", True, False, False),
        ("[rank0]:[E ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog caught collective operation timeout", True, False,
         False),
        ("E0612 10:00:00.123456  1234 raylet.cc:12] boom", True, False, False),
        ("[ERROR] Unable to connect to swarm server.", True, False, False),
        ("swanlab: Error: 401 Unauthorized, please check your api key", True, False, False),
        ("WARNING trainer.py:144 Waiting for experiences", False, True, False),
        ("2025-06-12 10:03:11.532 | WARNING  | ajet.launcher:main:200 - No processes found", False, True, False),
        ("INFO 06-12 10:04:02 [__init__.py:239] Automatically detected platform cuda.", False, False, True),
        ("2025-06-12 10:03:11.532 | INFO     | ajet.launcher:main:199 - Loading config", False, False, True),
        ("2025-06-12 10:03:19,004\tINFO worker.py:1832 -- Started a local Ray instance.", False, False, True),
        ("the ERROR | column of a table", False, False, False),
        ("swanlab: step 401 uploaded", False, False, False),
    ],
)
def test_log_records(line: str, error: bool, warning: bool, info: bool) -> None:
    assert lineshape.is_error_record(line) is error
    assert lineshape.is_warning_record(line) is warning
    assert lineshape.is_info_record(line) is info


@pytest.mark.parametrize(
    ("line", "retry"),
    [
        ("Failed to load dataset from huggingface hub, retrying (1/3) ...", True),
        ("WARNING:urllib3.connectionpool:Retrying (Retry(total=4)) after connection broken", True),
        ("env worker 12 failed, task will be retried", True),
        ("SWANLAB_API_KEY is not set; falling back to tensorboard", True),
        ("compute_log_prob failed after 3 retries: ('CUDA out of memory',)", False),
        ("torch.OutOfMemoryError: CUDA out of memory.", False),
    ],
)
def test_retry_announcements(line: str, retry: bool) -> None:
    assert lineshape.announces_retry(line) is retry


# ---- progress lines ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("line", "step"),
    [
        ("Training Progress:  25%|██        | 5/20 [30:00<90:00, 360.0s/it]", 5),
        ("step:12 - actor/kl_loss:0.001 - training/global_step:12", 12),
        ("{'training/global_step': 7, 'critic/real_reward': 0.5}", 7),
        ("actor/kl_loss: 0.0031", NO_NUMBER),
        ("rollout: 93%|█████████▎| 238/256 [04:11<00:19,  1.06s/it]", None),
    ],
)
def test_step_numbers(line: str, step: int | None) -> None:
    assert step_number(line) == step


@pytest.mark.parametrize(
    ("line", "progress"),
    [
        ("[rollout] step 3: 32 tasks x 4 repeats submitted to 64 env workers", True),
        ("rollout worker 57 finished task appworld/82e2fac_1", True),
        ("rollout: 93%|█████████▎| 238/256 [04:11<00:19,  1.06s/it]", True),
        ("[validation] running 1319 tasks x 4 (pass_n) ...", True),
        ("2025-06-12 10:31:12.118 | INFO     | ajet.backbone.trainer_verl:fit:550 - === + rollout step begin ===",
         True),
        ("INFO 06-12 10:31:02 [loggers.py:118] Engine 000: Avg prompt throughput: 1520.4 tokens/s, "
         "Avg generation throughput: 0.0 tokens/s", True),
        ("INFO 06-12 10:31:02 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
         "Avg generation throughput: 0.0 tokens/s, Running: 0 reqs", False),  # idle engine: printed while hung
        ("2025-06-12 12:04:59,115\tINFO worker.py:1953 -- Shutting down Ray.", False),
        ("(raylet) A worker died or was killed while executing a task by an unexpected system error.", False),
        ("Error executing job with overrides: []", False),
        ("Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.", False),
        ("WARNING 06-12 10:04:05 [gpu_model_runner.py:2011] rollout capture uses extra memory", False),
        ("env worker 12 failed, task will be retried", False),
        ("  File \"/root/agentjet/ajet/task_rollout/rollout.py\", line 12, in rollout", False),
        ("*** SIGABRT received at time=1749697361 on cpu 41 ***", False),
    ],
)
def test_activity_lines(line: str, progress: bool) -> None:
    assert shows_activity(line) is progress


# ---- the catalogue's benign look-alikes ---------------------------------------------------

FATAL_WITH_PATTERNS = [s for s in CATALOGUE if s.fatal and s.patterns]


def test_every_fatal_signature_states_its_benign_look_alikes() -> None:
    missing = [s.id for s in FATAL_WITH_PATTERNS if not s.benign]
    assert not missing, f"entries without a benign look-alike: {missing}"


BENIGN = [(s.id, b.example) for s in FATAL_WITH_PATTERNS for b in s.benign]


@pytest.mark.parametrize(("sig_id", "example"), BENIGN, ids=[f"{i}-{n}" for n, (i, _) in enumerate(BENIGN)])
def test_a_benign_look_alike_matches_its_entry_and_is_never_a_verdict(sig_id: str, example: str) -> None:
    sig = signature(sig_id)
    assert sig.matches(example), "a look-alike the patterns do not match tests nothing"
    assert evidence_shape(sig, example) is None
    scanner = LogScanner()
    scanner.feed(f"(TaskRunner pid=40211) {example}\n".encode())
    assert scanner.live_cause is None
    seen = Observation(now=600.0, started_at=0.0, attempt_started_at=0.0, max_seconds=None, process_alive=True,
                       cause=scanner.live_cause, cause_seen_at=0.0)
    assert DiagnosisRule().check(seen) is None  # ten minutes of silence after it: still nothing
    scanner.close()
    assert scanner.cause is None  # nor is it the diagnosis once the process exited
    (finding,) = [f for f in scanner.findings if f.signature == sig_id] or [None]
    assert finding is None or (not finding.fatal and "Not evidence" in finding.explanation)


def test_a_benign_pattern_that_misses_its_own_example_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "catalogue.yaml"
    path.write_text(
        "- {id: python_traceback, fatal: true, generic: true, explanation: x, repairable: false}\n"
        "- id: a\n  fatal: true\n  explanation: x\n  repairable: false\n  patterns: [boom]\n"
        "  benign: [{example: 'boom echoed', why: an echo, pattern: 'not there'}]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="does not match its own example"):
        load_catalogue(path)


def test_an_entry_may_accept_a_warning_as_evidence_only_when_it_says_so() -> None:
    line = "WARNING trainer.py:144 Waiting for experiences ... You can force stop the Trainer process by Ctrl+C."
    assert Shape.warning_record in signature("trinity_force_stop").shapes
    assert evidence_shape(signature("trinity_force_stop"), line) is Shape.warning_record
    assert Shape.warning_record not in signature("cuda_oom").shapes
    assert evidence_shape(signature("cuda_oom"), "WARNING trainer.py:1 CUDA out of memory") is None


# ---- evidence while the process lives: confirmation ---------------------------------------

def live(lines: list[str]) -> LogScanner:
    scanner = LogScanner()
    scanner.feed("".join(f"{line}\n" for line in lines).encode())
    return scanner


def verdict(scanner: LogScanner, seconds_since: float = 60.0) -> str | None:
    cause = scanner.live_cause
    obs = Observation(now=seconds_since, started_at=0.0, attempt_started_at=0.0, max_seconds=None,
                      process_alive=True, cause=cause, cause_seen_at=0.0, completed_run=scanner.completed_run,
                      progress_after_cause=scanner.progress_after_cause)
    proposal = DiagnosisRule().check(obs)
    return proposal.finding.signature if proposal and proposal.finding else None


def test_a_fatal_exception_with_nothing_after_it_is_a_verdict_once_settled() -> None:
    scanner = live(["Training Progress:  10%|█         | 2/20", OOM])
    assert verdict(scanner) == "cuda_oom"
    assert verdict(scanner, seconds_since=4.9) is None  # cuda_oom settles for 5 s


@pytest.mark.parametrize(
    "after",
    [
        "[rollout] step 3: 32 tasks x 4 repeats submitted to 64 env workers",
        "[validation] running 1319 tasks x 4 (pass_n) ...",
        "2025-06-12 10:31:12.118 | INFO     | ajet.backbone.trainer_verl:fit:574 - ==========start fit rollout",
        "step:3 - actor/kl_loss:0.001 - training/global_step:3",
    ],
)
def test_any_progress_after_the_line_clears_it(after: str) -> None:
    assert verdict(live(["Training Progress:  10%|█         | 2/20", OOM, after])) is None


@pytest.mark.parametrize(
    "after",
    [
        "Training Progress:  10%|█         | 2/20 [00:12<01:48]",  # tqdm's bar reprinted as the process ends
        "2025-06-12 12:04:59,115\tINFO worker.py:1953 -- Shutting down Ray.",
        "INFO 06-12 10:31:02 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 0.0 tokens/s, Running: 0 reqs",
        "Error executing job with overrides: []",
        "(raylet) A worker died or was killed while executing a task by an unexpected system error.",
    ],
)
def test_teardown_noise_and_idle_heartbeats_do_not_clear_it(after: str) -> None:
    assert verdict(live(["Training Progress:  10%|█         | 2/20", OOM, after, after])) == "cuda_oom"


def test_a_later_real_failure_after_a_cleared_one_is_still_seen() -> None:
    scanner = live([OOM, "[rollout] step 3: 32 tasks", "Training Progress:  20%|██        | 4/20",
                    "RuntimeError: CUDA error: out of memory"])
    cause = scanner.live_cause
    assert cause is not None and cause.line == 4 and verdict(scanner) == "cuda_oom"


def test_a_traceback_logged_while_retrying_is_not_evidence() -> None:
    scanner = live([
        LOGURU_ERROR.replace("ERROR   ", "ERROR   ") + "compute_log_prob error: (), retrying 1/3",
        "Traceback (most recent call last):",
        '  File "/root/agentjet/ajet/utils/retry.py", line 31, in wrapper',
        "    return func(*args, **kwargs)",
        OOM,
        "next",
    ])
    assert scanner.live_cause is None
    scanner.close()
    assert scanner.cause is None


def test_a_warning_interleaved_in_a_traceback_is_not_its_exception_line() -> None:
    diagnosis = diagnose_lines([
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "WARNING: CUDA out of memory during log-prob computation, retrying with micro batch 4",
        "KeyError: 'x'",
        "done",
    ])
    assert diagnosis.cause is not None and diagnosis.cause.signature == "python_traceback"
    assert diagnosis.cause.text == "KeyError: 'x'"


# ---- after the exit: the whole log, still only evidence -----------------------------------

def test_help_text_and_config_dumps_at_start_are_never_the_diagnosis() -> None:
    diagnosis = diagnose_lines([
        "  --skip-check-avail-gpu  skip the check that fails with 'GPU memory check failed'",
        "┃ Troubleshooting ┃ CUDA out of memory → lower ajet.rollout.max_model_len ┃",
        "  max_model_len: 18000  # larger than the maximum number of tokens that can be stored in KV cache",
        "Training Progress:  10%|█         | 2/20",
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "omegaconf.errors.ConfigAttributeError: Key 'use_agentscope' is not in struct",
    ])
    assert diagnosis.cause is not None and diagnosis.cause.signature == "python_traceback"
    assert [f.signature for f in diagnosis.findings if f.fatal] == ["python_traceback"]


def test_evidence_the_run_trained_past_is_not_what_ended_it() -> None:
    diagnosis = diagnose_lines([OOM, "Training Progress:  20%|██        | 4/20", "Training Progress:  25%|██   | 5/20"])
    assert diagnosis.cause is None
    (oom,) = diagnosis.findings
    assert not oom.fatal and "went on" in oom.explanation


def test_evidence_followed_only_by_rollout_lines_still_explains_an_exit() -> None:
    diagnosis = diagnose_lines([OOM, "[rollout] step 3: 32 tasks"])  # live: cleared; after the exit: the cause
    assert diagnosis.cause is not None and diagnosis.cause.signature == "cuda_oom"


def test_a_scan_resumed_from_a_checkpoint_keeps_the_open_evidence() -> None:
    import json

    first = live(["Training Progress:  10%|█         | 2/20", OOM])
    second = LogScanner.resume(json.loads(json.dumps(first.checkpoint())))
    assert second.live_cause == first.live_cause
    second.feed(b"Training Progress:  10%|# | 2/20\n")  # a redraw of the step already seen: still open
    assert second.live_cause is not None
    second.feed(b"[rollout] step 3: 32 tasks\n")
    assert second.live_cause is None
