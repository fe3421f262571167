"""Sweeps (statemachine/blueprint/sweep.py): the `[exp_sweep]` part and `--sweep` options, the grid, each experiment's
result dir, purpose and values, and what the preflight applies for one of them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ajet_runner.statemachine.blueprint.parse import parse_blueprint, validate_blueprint
from ajet_runner.statemachine.blueprint.sweep import (
    MAX_EXPERIMENTS,
    SLUG_MAX,
    is_seed_key,
    member_slug,
    parse_sweep_options,
    parse_sweep_text,
    plan_sweep,
    scalar,
    sweep_changes,
)
from ajet_runner.statemachine.fixes.preflight import plan_preflight

BLUEPRINT = """# Blueprint
## [exp_purpose]
Compare learning rates.
Second line of the purpose.

## [exp_codebase_dir]
/tmp/code

## [exp_venv_exe]
/usr/bin/python3

## [exp_yaml_path]
cfg/exp.yaml

## [exp_launch_command]
```bash
python -m ajet.launcher --conf cfg/exp.yaml
```

## [exp_result_dir]
/tmp/results/lr

## [exp_max_time]
2 hours
{sweep}
## [exp_notes]
keep these notes
"""

YAML = """ajet:
  experiment_name: read_yaml_name
  trainer_common:
    lr: 1.0e-6
    val_print_to_markdown_file_path: saved_val_result/shared_val.md
    train_print_to_markdown_file_path: saved_val_result/shared_train.md
    val_before_train: True
  execute_test: False
hydra:
  searchpath:
    - file://ajet/default_config
defaults:
  - ajet_default
  - _self_
seed: 3
"""


def _bp(sweep: str = ""):
    return parse_blueprint(BLUEPRINT.format(sweep=sweep))


@pytest.mark.parametrize("text", [
    "- ajet.trainer_common.lr: 1e-6, 5e-6\n- seed: [1, 2]",
    "ajet.trainer_common.lr = 1e-6, 5e-6\nseed = 1, 2",
    "```yaml\najet.trainer_common.lr: [1.0e-6, 5.0e-6]\nseed: [1, 2]\n```",
    "- description: what this stage compares\n* `ajet.trainer_common.lr`: 1e-6,5e-6\n1. seed: 1, 2\n- hint: two seeds",
])
def test_the_part_reads_in_the_layouts_people_write(text: str) -> None:
    axes, problems = parse_sweep_text(text)
    assert problems == []
    assert [(a.key, a.values) for a in axes] == [("ajet.trainer_common.lr", [1e-6, 5e-6]), ("seed", [1, 2])]


def test_values_are_yaml_scalars_and_a_flow_list_may_hold_commas() -> None:
    assert scalar("1e-5") == 1e-5 and isinstance(scalar("3"), int) and scalar("true") is True
    assert scalar("null") is None and scalar("gsm8k") == "gsm8k" and scalar("'0.5'") == "0.5"
    axes, problems = parse_sweep_options(['ajet.task_reader.type=["a,b", c]'])
    assert problems == [] and axes[0].values == ["a,b", "c"]


@pytest.mark.parametrize(("text", "wanted"), [
    ("- ajet.lr:", "has no values"),
    ("- ajet.lr: 1, 1", "repeats a value"),
    ("- ajet.lr: 1,,2", "empty value"),
    ("- ajet..lr: 1, 2", "is not a dotted YAML key"),
    ("- ajet.lr: [1, 2", "is not YAML flow"),
    ("- ajet.lr: {a: 1}, 2", "single YAML value"),
    ("just some prose here", "is not `key: v1, v2`"),
    ("- ajet.lr: 1, 2\n- ajet.lr: 3, 4", "names ajet.lr twice"),
])
def test_a_malformed_part_is_a_problem_naming_the_line(text: str, wanted: str) -> None:
    _, problems = parse_sweep_text(text)
    assert problems and wanted in problems[0].message and problems[0].field == "exp_sweep", problems


def test_the_grid_is_every_combination_first_key_slowest_each_with_its_dir_and_purpose() -> None:
    plan = plan_sweep("- a.lr: 1, 2\n- seed: 7, 8", result_dir="/r", purpose="Compare.\nMore text.")
    assert [m.values for m in plan.members] == [{"a.lr": 1, "seed": 7}, {"a.lr": 1, "seed": 8},
                                                 {"a.lr": 2, "seed": 7}, {"a.lr": 2, "seed": 8}]
    assert plan.members[1].result_dir == "/r/a.lr=1,seed=8"
    assert plan.members[1].purpose == "[a.lr=1, seed=8] Compare.\nMore text."
    assert plan.public()["keys"] == ["a.lr", "seed"]


def test_options_replace_the_parts_keys_and_add_new_ones() -> None:
    plan = plan_sweep("- a.lr: 1, 2\n- seed: 7, 8", ["seed=1,2,3", "b.t=0.5"], result_dir="/r", purpose="p")
    assert [(a.key, a.values) for a in plan.axes] == [("a.lr", [1, 2]), ("seed", [1, 2, 3]), ("b.t", [0.5])]
    assert len(plan.members) == 6


def test_a_grid_too_large_or_without_a_result_dir_is_refused() -> None:
    big = plan_sweep("- a: " + ", ".join(map(str, range(9))) + "\n- b: " + ", ".join(map(str, range(9))),
                     result_dir="/r", purpose="p")
    assert not big.ok and f"more than {MAX_EXPERIMENTS}" in big.problems[0].message and not big.members
    assert "`submit --max-experiments 81`" in big.problems[0].message and '"max_experiments": 81' in \
        big.problems[0].message  # the cap and the way past it
    allowed = plan_sweep("- a: " + ", ".join(map(str, range(9))) + "\n- b: " + ", ".join(map(str, range(9))),
                         result_dir="/r", purpose="p", max_experiments=81)
    assert allowed.ok and len(allowed.members) == 81
    nine = ", ".join(map(str, range(9)))
    huge = plan_sweep("\n".join(f"- k{i}: {nine}" for i in range(4)), result_dir="/r", purpose="p",
                      max_experiments=5000)  # 6561: past what any stage holds, whatever the submitter says
    assert not huge.ok and "at most 1000" in huge.problems[0].message and "--max-experiments" not in \
        huge.problems[0].message
    assert "exp_result_dir" in plan_sweep("- a: 1, 2", result_dir="", purpose="p").problems[0].message
    assert "names no key" in plan_sweep("- description: nothing swept", result_dir="/r", purpose="").problems[0].message


def test_result_dir_names_are_safe_and_distinct_even_when_shortened() -> None:
    assert member_slug({"a.path": "x/y z"}) == "a.path=x_y_z"
    long = [member_slug({"k": "v" * 300 + tail}) for tail in ("1", "2")]
    assert long[0] != long[1] and all(len(s) <= SLUG_MAX and "/" not in s for s in long)


def test_seed_keys() -> None:
    assert all(map(is_seed_key, ("seed", "ajet_sim.seed", "ajet.data.shuffle_seed", "seed_offset")))
    assert not any(map(is_seed_key, ("ajet.seedling", "ajet.trainer_common.lr")))


def test_the_parser_keeps_the_part_out_of_the_notes_and_validation_names_its_problems() -> None:
    bp = _bp("\n## [exp_sweep]\n- ajet.trainer_common.lr: 1e-6, 5e-6\n")
    assert bp.exp_sweep == "- ajet.trainer_common.lr: 1e-6, 5e-6"
    assert "lr" not in bp.notes and "keep these notes" in bp.notes
    assert bp.exp_max_time_seconds == 7200 and "exp_sweep" not in bp.public()
    assert parse_blueprint(BLUEPRINT.format(sweep="\n## [sweep]\n- seed: 1, 2\n")).exp_sweep == "- seed: 1, 2"
    bad = validate_blueprint(_bp("\n## [exp_sweep]\n- seed: 1, 1\n"), check_disk=False)
    assert [p.field for p in bad] == ["exp_sweep"] and "repeats a value" in bad[0].message
    assert _bp().exp_sweep == "" and validate_blueprint(_bp(), check_disk=False) == []


def test_a_sweep_needs_a_yaml_the_runner_configures() -> None:
    bp = _bp("\n## [exp_sweep]\n- seed: 1, 2\n").model_copy(update={"exp_yaml_path": ""})
    problems = validate_blueprint(bp, check_disk=False)
    assert any(p.field == "exp_sweep" and "no YAML" in p.message for p in problems), problems


def test_one_experiment_gets_its_values_its_own_name_and_results_files_on_the_patched_copy() -> None:
    plan = plan_sweep("- ajet.trainer_common.lr: 1e-6, 5e-6\n- seed: 1, 2", result_dir="/tmp/results/lr",
                      purpose="p")
    member = plan.members[3]
    bp = _bp().model_copy(update={"exp_result_dir": member.result_dir, "exp_sweep_values": member.values})
    now = 1_750_000_000.0
    changes = {c.key: c for c in plan_preflight(bp, YAML, now=now).changes}
    assert changes["ajet.trainer_common.lr"].old == 1e-6 and changes["ajet.trainer_common.lr"].new == 5e-6
    assert changes["seed"].old == 3 and changes["seed"].new == 2
    stamp = __import__("time").strftime("%Y%m%d_%H%M", __import__("time").localtime(now))
    assert changes["ajet.experiment_name"].new == f"exp_{stamp}_lr5e-06_seed2"
    val = changes["ajet.trainer_common.val_print_to_markdown_file_path"].new
    assert val == os.path.join(member.result_dir, "saved_val_result", "shared_val.md"), val  # not the shared file
    problems = plan_preflight(bp, YAML, now=now).problems
    assert not any(p.field == "ajet.experiment_name" for p in problems), problems  # the runner's own name


def test_sweep_changes_keep_a_fixed_name_as_the_base_and_warn_of_a_key_the_yaml_lacks() -> None:
    changes, problems = sweep_changes({"ajet.x.y": 1}, {"ajet": {"experiment_name": "mine"}}, yaml_path="/c/e.yaml",
                                      launch_stamp="20260101_0000")
    assert [c.key for c in changes] == ["ajet.x.y", "ajet.experiment_name"]
    assert changes[1].new == "mine_y1" and changes[0].old is None
    assert problems[0].field == "ajet.x.y" and "does not hold" in problems[0].message
    named, _ = sweep_changes({"ajet.experiment_name": "a"}, {}, yaml_path="/c/e.yaml", launch_stamp="s")
    assert [c.key for c in named] == ["ajet.experiment_name"]  # swept itself: no second name


def test_the_yaml_on_disk_is_never_touched_by_the_plan(tmp_path: Path) -> None:
    path = tmp_path / "exp.yaml"
    path.write_text(YAML)
    bp = _bp().model_copy(update={"exp_sweep_values": {"seed": 9}})
    plan_preflight(bp, path.read_text())
    assert path.read_text() == YAML
