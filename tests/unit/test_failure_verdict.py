"""What a failure means (statemachine/fixes/failure.py): every branch, pure."""

from __future__ import annotations

import pytest

from ajet_runner.statemachine.fixes.failure import RepairResult, Verdict, judge_failure

LAUNCHED = {"launched": True, "signature": "cuda_oom", "why": "lower the batch", "quote": "CUDA out of memory"}


def test_a_run_never_launched_is_not_repairable_and_not_counted() -> None:
    verdict = judge_failure(launched=False, signature="unknown", planned=True, applicable=True, budget_left=True,
                            rejection="error: exp_yaml_path: no such file")
    assert verdict == Verdict("give_up", RepairResult.not_repairable, "error: exp_yaml_path: no such file", False)
    assert judge_failure(launched=False, signature="x", planned=False, applicable=False,
                         budget_left=False).reason == "rejected by preflight"


@pytest.mark.parametrize(("planned", "applicable", "budget_left", "trigger", "result"), [
    (False, False, True, "give_up", RepairResult.not_repairable),
    (False, False, False, "give_up", RepairResult.not_repairable),  # no plan beats no budget
    (True, False, True, "give_up", RepairResult.no_applicable_change),
    (True, False, False, "give_up", RepairResult.no_applicable_change),
    (True, True, False, "give_up", RepairResult.budget_spent),
    (True, True, True, "repair", RepairResult.relaunched),
])
def test_each_verdict(planned: bool, applicable: bool, budget_left: bool, trigger: str, result: RepairResult) -> None:
    verdict = judge_failure(planned=planned, applicable=applicable, budget_left=budget_left, **LAUNCHED)
    assert (verdict.trigger, verdict.result, verdict.counted) == (trigger, result, True)
    assert verdict.reason.startswith("cuda_oom: ")


def test_reasons_quote_the_log_when_giving_up() -> None:
    spent = judge_failure(planned=True, applicable=True, budget_left=False, **LAUNCHED)
    assert spent.reason == "cuda_oom: repair budget spent — CUDA out of memory"
    no_plan = judge_failure(planned=False, applicable=False, budget_left=True, **{**LAUNCHED, "why": ""})
    assert no_plan.reason == "cuda_oom: not repairable — CUDA out of memory"
    relaunch = judge_failure(planned=True, applicable=True, budget_left=True, **LAUNCHED)
    assert relaunch.reason == "cuda_oom: lower the batch"
