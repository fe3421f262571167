"""The held-out benign corpus (tests/corpus/logs/benign/): replayed line by line through the scanner
and the diagnosis rule as a live run would be, nothing is ever proposed; the same replay of real
failures (tests/corpus/logs/*.log) does propose, after the signature's settle, so the harness can fail.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ajet_runner.statemachine.failures.diagnose import LogScanner
from ajet_runner.statemachine.rules import DiagnosisRule, Observation, Proposal

CORPUS = Path(__file__).parents[1] / "corpus" / "logs"
BENIGN = sorted((CORPUS / "benign").glob("*.log"))
SECONDS_PER_LINE = 0.25  # a chatty training log; the silence after the file is what settles a verdict
SILENCE = 600.0


def replay(path: Path) -> tuple[list[tuple[float, Proposal]], LogScanner]:
    """Feed the log one line at a time, SECONDS_PER_LINE apart, asking the rule after every line the way
    the watch loop does (the settle clock starts when a candidate cause first shows), then once more
    after SILENCE seconds without output. Returns (when, proposal) for every proposal."""
    rule = DiagnosisRule()
    scanner = LogScanner()
    seen: tuple[str, int] | None = None
    seen_at: float | None = None
    proposals: list[tuple[float, Proposal]] = []
    lines = path.read_bytes().decode("utf-8").split("\n")
    now = 0.0

    def ask(at: float) -> None:
        nonlocal seen, seen_at
        cause = scanner.live_cause
        key = (cause.signature, cause.line) if cause is not None else None
        if key != seen:
            seen, seen_at = key, (at if key is not None else None)
        obs = Observation(now=at, started_at=0.0, attempt_started_at=0.0, max_seconds=None, process_alive=True,
                          cause=cause, cause_seen_at=seen_at, completed_run=scanner.completed_run,
                          progress_after_cause=scanner.progress_after_cause)
        proposal = rule.check(obs)
        if proposal is not None:
            proposals.append((at, proposal))

    for i, line in enumerate(lines):
        now = i * SECONDS_PER_LINE
        scanner.feed((line + ("\n" if i < len(lines) - 1 else "")).encode())
        ask(now)
    ask(now + SILENCE)
    return proposals, scanner


def test_the_benign_corpus_has_the_cases_the_issue_names() -> None:
    names = {p.name for p in BENIGN}
    assert names >= {"echoed_env.log", "vllm_advice.log", "caught_oom_retried.log", "logged_oom_then_eval.log",
                     "final_metrics_actor_died.log", "startup_docs.log", "retried_connection.log",
                     "long_rollout_phase.log"}


@pytest.mark.parametrize("path", BENIGN, ids=[p.name for p in BENIGN])
def test_a_benign_log_in_a_live_run_is_never_a_verdict(path: Path) -> None:
    proposals, scanner = replay(path)
    assert not proposals, [(at, p.reason, p.finding.text if p.finding else "") for at, p in proposals]
    assert scanner.live_cause is None


@pytest.mark.parametrize("path", BENIGN, ids=[p.name for p in BENIGN])
def test_each_benign_log_does_mention_a_failure(path: Path) -> None:
    """A benign file no catalogue pattern matches would pass for any rule: each must hold a look-alike."""
    scanner = LogScanner()
    scanner.feed(path.read_bytes())
    scanner.close()
    assert scanner.findings, f"{path.name} matches no signature at all"


SHAPE_ONLY = ["echoed_env.log", "vllm_advice.log", "startup_docs.log", "retried_connection.log",
              "caught_oom_retried.log", "final_metrics_actor_died.log"]


@pytest.mark.parametrize("name", SHAPE_ONLY)
def test_look_alikes_are_not_the_diagnosis_of_an_exited_run_either(name: str) -> None:
    scanner = LogScanner()
    scanner.feed((CORPUS / "benign" / name).read_bytes())
    scanner.close()
    assert scanner.cause is None, scanner.cause


@pytest.mark.parametrize(("name", "expected", "settle"), [
    ("cuda_oom_ray.log", "cuda_oom", 5.0),
    ("host_oom_ray.log", "host_oom", 5.0),
    ("nccl_timeout.log", "nccl_timeout", 8.0),
    ("network_hf.log", "network_unreachable", 8.0),
    ("trinity_force_stop.log", "trinity_force_stop", 8.0),
])
def test_the_same_replay_of_a_real_failure_is_a_verdict_after_its_settle(name: str, expected: str,
                                                                        settle: float) -> None:
    proposals, _ = replay(CORPUS / name)
    assert proposals, f"{name}: nothing proposed"
    at, first = proposals[0]
    assert first.finding is not None and first.finding.signature == expected
    assert first.trigger == "anomaly" and first.rule == "diagnosis"
    line_at = (first.finding.line - 1) * SECONDS_PER_LINE
    assert at - line_at >= settle
