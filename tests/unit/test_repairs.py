"""Repair plans resolved against a real experiment's YAML data, command and node."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from ajet_runner.statemachine.fixes.repairs import MISSING, ResolvedRepair, get_dotted, resolve_repair, set_dotted
from ajet_runner.statemachine.models import RepairAction

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "yaml"
CMD = "cd /repo && python -m ajet.launcher --conf tests/bench/benchmark_math/benchmark_math.yaml --with-ray"


@pytest.fixture()
def data() -> dict:
    return yaml.safe_load((CORPUS / "benchmark_math.yaml").read_text(encoding="utf-8"))


def resolve(actions: list[RepairAction], data: dict, *, command: str = CMD, env: dict | None = None,
            installed: set[str] | None = None) -> ResolvedRepair:
    have = installed or set()
    return resolve_repair(actions, yaml_data=data, command=command, env=env or {}, installed=have.__contains__)


def test_get_and_set_dotted() -> None:
    d: dict = {"a": {"b": {"c": 1}}, "x": 5, "n": None}
    assert get_dotted(d, "a.b.c") == 1
    assert get_dotted(d, "a.b.missing") is None
    assert get_dotted(d, "x.y", "dflt") == "dflt"  # a scalar in the way
    assert get_dotted(d, "n", MISSING) is None  # explicit null is not absent
    assert get_dotted(d, "absent", MISSING) is MISSING
    assert get_dotted(None, "a") is None
    set_dotted(d, "a.b.c", 2)
    set_dotted(d, "new.deep.key", True)
    set_dotted(d, "x.y", 1)  # the scalar gives way to a map
    assert d == {"a": {"b": {"c": 2}}, "x": {"y": 1}, "n": None, "new": {"deep": {"key": True}}}


def test_factor_on_ints_stays_int_and_on_floats_stays_float(data: dict) -> None:
    before = copy.deepcopy(data)
    r = resolve([
        RepairAction(kind="set_yaml", key="ajet.rollout.max_model_len", factor=0.75, description="less KV cache"),
        RepairAction(kind="set_yaml", key="ajet.rollout.temperature", factor=0.9),
    ], data)
    changes = {c.key: c for c in r.yaml_changes}
    assert changes["ajet.rollout.max_model_len"].old == 10000
    assert changes["ajet.rollout.max_model_len"].new == 7500
    assert isinstance(changes["ajet.rollout.max_model_len"].new, int)
    assert changes["ajet.rollout.max_model_len"].reason == "less KV cache"
    assert changes["ajet.rollout.temperature"].new == 0.9
    assert r.applicable
    assert data == before  # the caller's data is not modified
    assert any("10000 -> 7500" in note for note in r.notes)


def test_factor_respects_minimum_and_skips_when_already_there(data: dict) -> None:
    r = resolve([RepairAction(kind="set_yaml", key="ajet.data.train_batch_size", factor=0.1, minimum=64)], data)
    assert [(c.old, c.new) for c in r.yaml_changes] == [(100, 64)]
    data["ajet"]["data"]["train_batch_size"] = 64
    r = resolve([RepairAction(kind="set_yaml", key="ajet.data.train_batch_size", factor=0.5, minimum=64)], data)
    assert r.yaml_changes == [] and not r.applicable
    assert any("minimum" in note for note in r.notes)


def test_integer_factor_always_moves_and_never_reaches_zero(data: dict) -> None:
    up = resolve([RepairAction(kind="set_yaml", key="ajet.rollout.multi_turn.max_sample_per_task", factor=1.2)], data)
    assert up.yaml_changes[0].new == 3  # ceil(2 * 1.2): a raise that rounds to 2 would change nothing
    data["ajet"]["debug"]["debug_max_parallel"] = 1
    down = resolve([RepairAction(kind="set_yaml", key="ajet.debug.debug_max_parallel", factor=0.5)], data)
    assert down.yaml_changes == [] and not down.applicable  # 1 is the floor for a halved int


def test_absent_key_with_factor_uses_value_or_is_skipped(data: dict) -> None:
    skipped = resolve([RepairAction(kind="set_yaml", key="ajet.trainer_common.mini_batch_num", factor=2)], data)
    assert skipped.yaml_changes == [] and not skipped.applicable
    assert "not in the YAML" in skipped.notes[0]
    used = resolve([RepairAction(kind="set_yaml", key="ajet.trainer_common.mini_batch_num", factor=2, value=2)], data)
    assert [(c.key, c.old, c.new) for c in used.yaml_changes] == [("ajet.trainer_common.mini_batch_num", None, 2)]


def test_set_value_noop_and_non_numeric(data: dict) -> None:
    noop = resolve([RepairAction(kind="set_yaml", key="ajet.trainer_common.logger", value="swanlab")], data)
    assert not noop.applicable and "already" in noop.notes[0]
    off = resolve([RepairAction(kind="set_yaml", key="ajet.execute_test", value=False)], data)
    assert [(c.old, c.new) for c in off.yaml_changes] == [(True, False)]
    text = resolve([RepairAction(kind="set_yaml", key="ajet.model.path", factor=0.5)], data)
    assert not text.applicable and "not a number" in text.notes[0]
    nokey = resolve([RepairAction(kind="set_yaml", value=1)], data)
    assert not nokey.applicable


def test_two_actions_on_one_key_compound_into_one_change(data: dict) -> None:
    r = resolve([RepairAction(kind="set_yaml", key="ajet.rollout.max_model_len", factor=0.5),
                 RepairAction(kind="set_yaml", key="ajet.rollout.max_model_len", factor=0.5)], data)
    assert [(c.old, c.new) for c in r.yaml_changes] == [(10000, 2500)]


def test_set_env_only_new_values(data: dict) -> None:
    env = {"NCCL_NVLS_ENABLE": "0"}
    r = resolve([RepairAction(kind="set_env", key="PYTORCH_CUDA_ALLOC_CONF", value="expandable_segments:True"),
                 RepairAction(kind="set_env", key="NCCL_NVLS_ENABLE", value=0)], data, env=env)
    assert r.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    assert r.applicable
    again = resolve([RepairAction(kind="set_env", key="NCCL_NVLS_ENABLE", value="0")], data, env=env)
    assert again.env == {} and not again.applicable


def test_prefix_needs_the_program_installed(data: dict) -> None:
    action = RepairAction(kind="prefix_command", value="proxychains4 -q", requires="proxychains4")
    missing = resolve([action], data)
    assert missing.command == CMD and not missing.applicable
    assert "proxychains4 is not installed" in missing.notes[0]
    present = resolve([action], data, installed={"proxychains4"})
    assert present.command == CMD.replace("&& python", "&& proxychains4 -q python")
    assert present.applicable
    twice = resolve([action], data, command=present.command, installed={"proxychains4"})
    assert not twice.applicable


def test_flags_added_and_removed_on_the_launcher(data: dict) -> None:
    r = resolve([RepairAction(kind="add_flag", value="--skip-check-avail-gpu"),
                 RepairAction(kind="remove_flag", value="--with-ray")], data)
    assert r.command == CMD.replace("--with-ray", "--skip-check-avail-gpu")
    assert r.applicable
    none = resolve([RepairAction(kind="remove_flag", value="--autokill"),
                    RepairAction(kind="add_flag", value="--with-ray")], data)
    assert none.command == CMD and not none.applicable
    script = resolve([RepairAction(kind="add_flag", value="--skip-check-avail-gpu")], data, command="bash run.sh")
    assert script.command == "bash run.sh" and not script.applicable
    assert "does not run ajet.launcher" in script.notes[0]


def test_cleanups_are_collected_once_and_unknown_ones_skipped(data: dict) -> None:
    r = resolve([RepairAction(kind="cleanup", value="ray"), RepairAction(kind="cleanup", value="ray"),
                 RepairAction(kind="cleanup", value="gpu_processes"), RepairAction(kind="cleanup", value="disk")], data)
    assert r.cleanups == ["ray", "gpu_processes"]
    assert r.applicable
    assert any("unknown cleanup" in note for note in r.notes)


def test_a_plan_that_changes_nothing_is_not_applicable(data: dict) -> None:
    r = resolve([], data)
    assert not r.applicable and r.command == CMD
    assert "relaunching would fail the same way" in r.notes[-1]


def test_full_oom_plan_on_the_benchmark_yaml(data: dict) -> None:
    plan = [
        RepairAction(kind="set_env", key="PYTORCH_CUDA_ALLOC_CONF", value="expandable_segments:True"),
        RepairAction(kind="set_yaml", key="ajet.rollout.max_model_len", factor=0.75, minimum=4096),
        RepairAction(kind="set_yaml", key="ajet.trainer_common.mini_batch_num", factor=2, value=2),
        RepairAction(kind="cleanup", value="gpu_processes"),
    ]
    r = resolve(plan, data)
    assert {c.key: c.new for c in r.yaml_changes} == {
        "ajet.rollout.max_model_len": 7500, "ajet.trainer_common.mini_batch_num": 2,
    }
    assert r.env and r.cleanups == ["gpu_processes"] and r.applicable
    assert len(r.notes) == 4
    assert ResolvedRepair.model_validate_json(r.model_dump_json()) == r


def test_alternatives_apply_only_the_first_that_changes_something() -> None:
    from ajet_runner.statemachine.failures.signatures import signature

    plan = signature("network_unreachable").repair
    cmd = "python -m ajet.launcher --conf x.yaml"
    with_proxy = resolve_repair(plan, yaml_data={}, command=cmd, env={}, installed=lambda p: True)
    assert with_proxy.command.startswith("proxychains4 -q") and "HF_HUB_OFFLINE" not in with_proxy.env
    without = resolve_repair(plan, yaml_data={}, command=cmd, env={}, installed=lambda p: False)
    assert without.command == cmd and without.env == {"HF_HUB_OFFLINE": "1"}


def test_a_repair_that_changes_the_batch_says_the_step_unit_changed(data: dict) -> None:
    from ajet_runner.statemachine.failures.signatures import signature

    data["ajet"]["data"]["train_batch_size"] = 32
    data["ajet"]["trainer_common"].pop("total_training_steps", None)
    oom = list(signature("cuda_oom").repair)
    r = resolve(oom, data)
    assert "set ajet.data.train_batch_size: 32 -> 16 (smaller batches use less memory per step)" in r.applied
    [note] = [line for line in r.applied if line.startswith("step unit changed")]
    assert "one step is 0.5x the samples it was; an epoch now has 2x as many steps" in note
    assert "not comparable" in note
    data["ajet"]["trainer_common"]["total_training_steps"] = 20
    fixed = [line for line in resolve(oom, data).applied if line.startswith("step unit changed")]
    assert "total_training_steps=20 is fixed, so the run keeps its step count" in fixed[0]
    other = resolve([RepairAction(kind="set_yaml", key="ajet.rollout.max_model_len", factor=0.5)], data)
    assert not [line for line in other.applied if line.startswith("step unit")]  # not every change is one
