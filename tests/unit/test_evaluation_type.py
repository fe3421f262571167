"""One evaluation type (statemachine/models.py Evaluation) from the parser to the stage report: its stored form
reads back as the same evaluation, and the tolerant reader takes what older writers stored."""

from __future__ import annotations

import math

from ajet_runner.statemachine.logs.results import normalize_key
from ajet_runner.statemachine.models import Evaluation


def test_the_stored_form_reads_back_as_the_same_evaluation() -> None:
    e = Evaluation(step=40, dataset="gsm8k", metrics={"mean_reward": 0.5, "task_pass_rate@1": 0.25}, attempt=2)
    assert e.to_json() == {"step": 40, "dataset": "gsm8k", "metrics": {"mean_reward": 0.5, "task_pass_rate@1": 0.25},
                           "attempt": 2}
    assert Evaluation.from_json(e.to_json()) == e
    bare = Evaluation(step=1)
    assert "attempt" not in bare.to_json() and Evaluation.from_json(bare.to_json()) == bare


def test_the_reader_takes_older_shapes_and_refuses_what_names_no_step() -> None:
    flat = Evaluation.from_json({"global_steps": "3", "dataset": None, "mean_reward": "41.25%",
                                 "num_pass_n_tasks(pass@4)": 7, "note": "text", "flag": True}, normalize_key)
    assert flat is not None and flat.step == 3 and flat.dataset == ""
    assert flat.metrics == {"mean_reward": 41.25, "num_pass_n_tasks": 7.0}
    assert Evaluation.from_json({"metrics": {"mean_reward": 1.0}}) is None
    assert Evaluation.from_json("not a dict") is None
    assert Evaluation.from_json({"step": math.inf}) is None


def test_get_gives_finite_values_only() -> None:
    e = Evaluation(step=0, metrics={"a": math.nan, "b": math.inf, "c": 2})
    assert (e.get("a"), e.get("b"), e.get("c"), e.get("missing")) == (None, None, 2.0, None)


def test_the_report_data_keeps_each_evaluations_attempt_into_results_json() -> None:
    """The report's evaluations come as the stored form or as instances; either way the attempt that produced
    each one reaches results.json (a relaunch's curve says which attempt evaluated which step)."""
    from ajet_runner.workers.report.data import ReportData

    fields = {k: (v.default if not v.is_required() else "x") for k, v in ReportData.model_fields.items()}
    fields["started_at"] = None
    for given in ([{"step": 4, "dataset": "d", "metrics": {"mean_reward (pass@4)": 0.5}, "attempt": 2}],
                  [Evaluation(step=4, dataset="d", metrics={"mean_reward": 0.5}, attempt=2)]):
        data = ReportData.model_validate({**fields, "evaluations": given})
        assert data.model_dump()["evaluations"] == [
            {"step": 4, "dataset": "d", "metrics": {"mean_reward": 0.5}, "attempt": 2}]
