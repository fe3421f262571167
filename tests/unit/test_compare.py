"""The stage comparison (statemachine/comparison/compare.py) and its files (workers/report/stage_report.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from ajet_runner.resultdir.stage_inputs import facts_for, read_facts
from ajet_runner.statemachine.comparison.compare import (
    ExperimentFacts,
    compare,
    decisive_of,
    facts_from_record,
    flatten,
)
from ajet_runner.workers.report.stage_report import (
    STAGE_PLOT_NAME,
    STAGE_REPORT_NAME,
    STAGE_RESULTS_NAME,
    write_stage_report,
)

CONFIG = {"ajet": {"trainer_common": {"lr": 1e-6, "test_freq": 2}, "model": {"path": "Qwen"}}, "seed": 1,
          "defaults": ["ajet_default", "_self_"]}


def curve(*values: float, metric: str = "mean_reward") -> list[dict[str, Any]]:
    return [{"step": 2 * i, "dataset": "val", "metrics": {metric: v, "task_pass_rate@1": v / 2,
                                                        "num_all_success_tasks": 100 * v}}
            for i, v in enumerate(values)]


def facts(exp_id: str, *, lr: float = 1e-6, seed: int = 1, values: tuple[float, ...] = (0.3, 0.5),
          outcome: str = "completed", reason: str = "", command: str = "python -m ajet.launcher --conf a.yaml",
          config: dict[str, Any] | None = CONFIG) -> ExperimentFacts:
    flat = None
    if config is not None:
        flat = flatten(config)
        flat.update({"ajet.trainer_common.lr": lr, "seed": seed})
    return ExperimentFacts(id=exp_id, purpose=f"run {exp_id}", outcome=outcome, reason=reason, attempts=1,
                           evaluations=curve(*values), config=flat, launch_command=command, train_steps=4,
                           elapsed_seconds=12.0, source="results.json")


def test_only_the_keys_that_differ_are_named_and_seeds_make_repeats() -> None:
    c = compare("s", [facts("a", lr=1e-6, seed=1, values=(0.3, 0.5)), facts("b", lr=1e-6, seed=2, values=(0.3, 0.6)),
                      facts("c", lr=5e-6, seed=1, values=(0.3, 0.8)), facts("d", lr=5e-6, seed=2, values=(0.3, 0.9))])
    assert c.differing_keys == ["ajet.trainer_common.lr", "seed"] and c.seed_keys == ["seed"]
    assert c.compared_keys == ["ajet.trainer_common.lr"]
    assert [r.id for r in c.ranking_final] == ["d", "c", "b", "a"]
    assert c.rows[2].differs == {"ajet.trainer_common.lr": "5e-06", "seed": "1"}
    best = c.rows[0].metrics["mean_reward"]
    assert (best.final, best.final_step, best.best, best.best_step) == (0.5, 2, 0.5, 2)
    assert "num_all_success_tasks" not in c.metrics and c.metrics[0] == "mean_reward"  # counts are not compared
    top, low = c.repeat_groups
    assert top.label == "ajet.trainer_common.lr=5e-06" and top.members == ["c", "d"] and top.counted == 2
    assert abs(top.final_mean - 0.85) < 1e-9 and abs(top.final_std - 0.0707106781) < 1e-6
    assert (top.final_min, top.final_max) == (0.8, 0.9) and low.members == ["a", "b"]
    assert c.not_succeeded == [] and not c.command_differs
    assert c.curves["mean_reward"]["d"] == [[0.0, 0.3], [2.0, 0.9]]


def test_without_a_seed_key_there_are_no_repeat_groups_and_identical_runs_differ_in_nothing() -> None:
    same = compare("s", [facts("a"), facts("b")])
    assert same.differing_keys == [] and same.repeat_groups == []


def test_launch_command_differences_show_the_part_that_differs() -> None:
    c = compare("s", [facts("a", command="python -m ajet.launcher --conf a.yaml --backbone verl"),
                      facts("b", command="python -m ajet.launcher --conf a.yaml --backbone trinity")])
    assert c.command_differs and [r.command_part for r in c.rows] == ["verl", "trinity"]


def test_a_failed_experiment_is_a_row_with_its_decisive_line_and_ranks_after_those_with_a_value() -> None:
    reason = 'gave up: not repairable; log line 42: "AssertionError: Model path /m does not exist."'
    failed = facts("b", values=(), outcome="failed", reason=reason)
    failed.decisive = decisive_of(reason)
    c = compare("s", [facts("a"), failed])
    assert [r.id for r in c.rows] == ["a", "b"] and c.not_succeeded == ["b"]
    assert c.rows[1].decisive == 'log line 42: "AssertionError: Model path /m does not exist."'
    assert [(r.id, r.value) for r in c.ranking_final] == [("a", 0.5), ("b", None)]


def test_decisive_lines_come_from_what_the_runner_recorded_only() -> None:
    assert decisive_of("timed out after 2h") == ""
    assert decisive_of("", [{"log_excerpt": "x\nRuntimeError: boom"}]) == 'log excerpt: "RuntimeError: boom"'
    assert decisive_of("", [], ["", "last words", " "]) == 'last log line: "last words"'


def test_an_unreadable_config_is_named_not_assumed_equal() -> None:
    c = compare("s", [facts("a", lr=1e-6), facts("b", lr=5e-6), facts("c", config=None)])
    assert c.unknown_config == ["c"] and c.rows[2].differs == {"ajet.trainer_common.lr": "(unknown)"}
    assert c.differing_keys == ["ajet.trainer_common.lr"]


def test_the_ranking_metric_is_chosen_and_one_nobody_recorded_ranks_no_one() -> None:
    a, b = facts("a", values=(0.3, 0.9)), facts("b", values=(0.3, 0.5))
    b.evaluations[-1].metrics["task_pass_rate@1"] = 0.95  # b is better by pass rate, worse by reward
    by_rate = compare("s", [a, b], metric="task_pass_rate@1")
    assert [r.id for r in by_rate.ranking_final] == ["b", "a"] and by_rate.metric == "task_pass_rate@1"
    assert [r.id for r in compare("s", [a, b]).ranking_final] == ["a", "b"]
    assert all(r.value is None for r in compare("s", [a, b], metric="TGC@1").ranking_best)


def test_facts_from_a_record_and_its_evaluation_events() -> None:
    rec = {"id": "x", "state": "running", "outcome": "", "purpose": "p", "result_dir": "/r", "started_at": 10,
           "ctx": {"attempts": [{"number": 1}], "repairs": [{"signature": "cuda_oom"}]},
           "blueprint_json": {"exp_sweep_values": {"seed": 2}, "exp_launch_command": "python -m x"}}
    f = facts_from_record(rec, [{"step": 0, "dataset": "", "metrics": {"mean_reward": 0.4}}], config={"seed": 1})
    assert f.state == "running" and f.attempts == 1 and f.repair_signatures == ["cuda_oom"]
    assert f.config == {"seed": 2} and f.launch_command == "python -m x" and f.source == "record"
    row = compare("s", [f]).rows[0]
    assert not row.succeeded and row.metrics["mean_reward"].final == 0.4


def _result_dir(root: Path, exp_id: str, value: float, outcome: str = "completed") -> Path:
    d = root / exp_id
    d.mkdir(parents=True)
    doc = {"id": exp_id, "purpose": exp_id, "outcome": outcome, "reason": "", "result_dir": str(d),
           "attempt_count": 1, "repair_count": 0, "elapsed_seconds": 5.0, "train_steps": 4,
           "evaluations": curve(0.2, value), "sweep": {"seed": int(value * 10)}, "launch_command": "python -m a"}
    (d / "results.json").write_text(json.dumps(doc))
    (d / "config.original.yaml").write_text(yaml.safe_dump(CONFIG))
    (d / "experiment_report.md").write_text("# report\n")
    (d / "repair_log.md").write_text("# repairs\n")
    return d


def test_the_stage_files_link_each_report_and_draw_every_curve(tmp_path: Path) -> None:
    dirs = [_result_dir(tmp_path / "runs", name, v) for name, v in (("a", 0.5), ("b", 0.7))]
    found = [read_facts(str(d)) for d in dirs]
    assert all(f is not None and f.source == "results.json" for f in found)
    out = tmp_path / "stage"
    written = write_stage_report(out, compare("s", found))  # type: ignore[arg-type]
    assert set(written) == {"plot", "results", "report"}
    assert (out / STAGE_PLOT_NAME).read_bytes()[:4] == b"\x89PNG"
    text = (out / STAGE_REPORT_NAME).read_text()
    assert "[report](<../runs/a/experiment_report.md>)" in text and "[repair log](<../runs/b/repair_log.md>)" in text
    assert "- `seed` (a seed: experiments that differ only in it are repeats): `5`, `7`" in text
    assert "Every experiment completed or early-stopped." in text
    doc = json.loads((out / STAGE_RESULTS_NAME).read_text())
    assert doc["rows"][0]["report_link"] == "../runs/a/experiment_report.md"
    assert [r["id"] for r in doc["ranking_final"]] == ["b", "a"] and doc["files"]["plot"] == STAGE_PLOT_NAME


def test_no_curve_means_no_plot_and_a_stale_one_goes(tmp_path: Path) -> None:
    (tmp_path / STAGE_PLOT_NAME).write_bytes(b"old")
    empty = ExperimentFacts(id="a", outcome="failed", decisive='log line 1: "boom"', source="results.json")
    write_stage_report(tmp_path, compare("s", [empty]))
    assert not (tmp_path / STAGE_PLOT_NAME).exists()
    text = (tmp_path / STAGE_REPORT_NAME).read_text()
    assert "No experiment has a curve yet" in text and '- `a` (failed): log line 1: "boom"' in text


def test_facts_for_prefers_the_results_file_of_that_experiment(tmp_path: Path) -> None:
    d = _result_dir(tmp_path, "a", 0.5)
    records = [{"id": "a", "state": "finished", "result_dir": str(d)},
               {"id": "z", "state": "finished", "result_dir": str(d)},  # the dir holds another run's files
               {"id": "r", "state": "running", "result_dir": str(tmp_path / "none")}]
    got = facts_for(records, lambda exp_id: [{"step": 0, "metrics": {"mean_reward": 0.1}}] if exp_id else [])
    assert [(f.id, f.source) for f in got] == [("a", "results.json"), ("z", "record"), ("r", "record")]
    assert got[1].config is not None  # the YAML in the dir is still that dir's
