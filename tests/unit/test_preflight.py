"""Preflight rules on realistic AgentJet YAMLs (tests/corpus/yaml) and launch commands."""

from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ajet_runner.statemachine.fixes.preflight import PreflightPlan, gpus_needed, plan_preflight
from ajet_runner.statemachine.models import Blueprint, Level
from tests.load import examples

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "yaml"
TC = "ajet.trainer_common"
RESULT = "/data/results/exp01"


def corpus(name: str) -> str:
    return (CORPUS / name).read_text(encoding="utf-8")


def blueprint(yaml_name: str = "benchmark_math.yaml", *, command: str | None = None, **kw: object) -> Blueprint:
    yaml_path = f"tests/corpus/yaml/{yaml_name}"
    fields: dict = dict(
        exp_codebase_dir="/repo",
        exp_yaml_path=yaml_path,
        exp_launch_command=command if command is not None else f"python -m ajet.launcher --conf {yaml_path} --autokill",
        exp_result_dir=RESULT,
        exp_max_time_seconds=4 * 3600,
    )
    fields.update(kw)
    return Blueprint(**fields)


def plan(yaml_name: str = "benchmark_math.yaml", *, env: dict | None = None, text: str | None = None,
         **kw: object) -> PreflightPlan:
    return plan_preflight(blueprint(yaml_name, **kw), corpus(yaml_name) if text is None else text,
                          env={} if env is None else env)


def changes(p: PreflightPlan) -> dict:
    return {c.key: (c.old, c.new) for c in p.changes}


def messages(p: PreflightPlan, field: str) -> list[str]:
    return [pr.message for pr in p.problems if pr.field == field]


def test_benchmark_math_yaml_gets_every_fix() -> None:
    p = plan(env={"SWANLAB_API_KEY": "k"})
    assert p.ok
    assert changes(p) == {
        "ajet.execute_test": (True, False),
        f"{TC}.val_before_train": (None, True),
        f"{TC}.val_print_to_markdown_file_path": (None, f"{RESULT}/saved_val_result/val.md"),
        f"{TC}.train_print_to_markdown_file_path": (None, f"{RESULT}/saved_train_result/train.md"),
    }
    assert all(c.reason for c in p.changes)
    assert p.val_result_path == f"{RESULT}/saved_val_result/val.md"
    assert p.train_result_path == f"{RESULT}/saved_train_result/train.md"
    assert p.gpus_needed == 8
    assert any("almost never" in m for m in messages(p, f"{TC}.test_freq"))
    assert all(pr.level == Level.warning for pr in p.problems)


def test_autokill_is_stripped_and_recorded() -> None:
    p = plan()
    assert p.command == "python -m ajet.launcher --conf tests/corpus/yaml/benchmark_math.yaml"
    assert p.cleanup_on_stop
    [change] = p.command_changes
    assert change.key == "exp_launch_command"
    assert change.old.endswith("--autokill") and change.new == p.command
    assert "kills every process" in change.reason and "scoped cleanup" in change.reason
    clean = plan(command="python -m ajet.launcher --conf tests/corpus/yaml/benchmark_math.yaml")
    assert clean.command_changes == [] and not clean.cleanup_on_stop


def test_kill_with_keywords_is_stripped_too() -> None:
    p = plan(command="python -m ajet.launcher --kill 'python|ray' --conf tests/corpus/yaml/benchmark_math.yaml")
    assert p.command == "python -m ajet.launcher --conf tests/corpus/yaml/benchmark_math.yaml"
    assert p.cleanup_on_stop and len(p.command_changes) == 1


def test_swanlab_without_key_switches_to_console() -> None:
    p = plan(env={})
    assert changes(p)[f"{TC}.logger"] == ("swanlab", "console")
    [why] = messages(p, f"{TC}.logger")
    assert "SWANLAB_API_KEY" in why and "console" in why
    kept = plan(env={"SWANLAB_API_KEY": "secret"})
    assert f"{TC}.logger" not in changes(kept)
    assert ("SWANLAB_API_KEY", True) in [(d.variable, d.is_set) for d in kept.env_decisions]
    # AgentJet's own check reads only SWANLAB_API_KEY: offline mode does not save the run
    offline = plan(env={"SWANLAB_MODE": "offline"})
    assert changes(offline)[f"{TC}.logger"] == ("swanlab", "console")
    assert [d.decision for d in offline.env_decisions if d.variable == "SWANLAB_API_KEY"] == [
        "not set: logger swanlab switched to console"]
    unknown = plan_preflight(blueprint(), corpus("benchmark_math.yaml"), env=None)
    assert f"{TC}.logger" not in changes(unknown)  # an unknown environment is not a missing key


def test_absent_logger_means_agentjet_default_swanlab() -> None:
    p = plan("appworld_2nodes.yaml", env={})
    assert changes(p)[f"{TC}.logger"] == (None, "console")


def test_logger_list_keeps_other_loggers() -> None:
    text = corpus("benchmark_math.yaml").replace("logger: swanlab", "logger: [console, swanlab, wandb]")
    p = plan(text=text, env={"WANDB_API_KEY": "w"})
    assert changes(p)[f"{TC}.logger"] == (["console", "swanlab", "wandb"], ["console", "wandb"])


def test_countdown_nulls_are_replaced_and_good_values_kept() -> None:
    p = plan("countdown.yaml", env={"SWANLAB_API_KEY": "k"})
    assert changes(p) == {
        f"{TC}.val_before_train": (False, True),
        f"{TC}.val_print_to_markdown_file_path": (None, f"{RESULT}/saved_val_result/val.md"),
        f"{TC}.train_print_to_markdown_file_path": (None, f"{RESULT}/saved_train_result/train.md"),
    }
    assert messages(p, "ajet.experiment_name") == []  # read_yaml_name: the launcher adds a timestamp


def test_paths_with_a_directory_are_kept_and_bare_names_moved() -> None:
    p = plan("appworld_2nodes.yaml", env={"SWANLAB_API_KEY": "k"})
    c = changes(p)
    assert f"{TC}.val_print_to_markdown_file_path" not in c
    assert c[f"{TC}.train_print_to_markdown_file_path"] == (
        "qwen14b-appworld-train.md", f"{RESULT}/saved_train_result/qwen14b-appworld-train.md")
    assert "bare file name" in next(x.reason for x in p.changes if x.key.endswith("train_print_to_markdown_file_path"))
    # relative paths run from the codebase dir, where the launcher runs
    assert p.val_result_path == "/repo/saved_val_result/qwen14b-appworld-exp-01.md"


def test_appworld_two_nodes_warnings() -> None:
    p = plan("appworld_2nodes.yaml", env={"SWANLAB_API_KEY": "k"})
    assert p.gpus_needed == 16 and p.nnodes == 2
    assert not messages(p, f"{TC}.nnodes")  # a multi-node run is placed on two nodes, nothing to warn about
    assert any("is fixed" in m and "resume" in m for m in messages(p, "ajet.experiment_name"))
    assert any("only the last step" in m for m in messages(p, f"{TC}.test_freq"))
    [short] = messages(p, f"{TC}.total_training_steps")
    assert "total_training_steps=40" in short and "exp_max_time 4h:" in short
    assert changes(p)["ajet.execute_test"] == (True, False)


def test_long_enough_run_is_not_flagged() -> None:
    text = corpus("appworld_2nodes.yaml").replace("total_training_steps: 40", "total_training_steps: 400")
    assert messages(plan("appworld_2nodes.yaml", text=text), f"{TC}.total_training_steps") == []
    no_budget = plan("appworld_2nodes.yaml", exp_max_time_seconds=None)
    assert messages(no_budget, f"{TC}.total_training_steps") == []


def test_zero_epochs_and_disabled_validation_warn() -> None:
    text = corpus("benchmark_math.yaml").replace("total_epochs: 100", "total_epochs: 0").replace(
        "test_freq: 999999", "test_freq: 0")
    p = plan(text=text)
    assert any("no full epoch" in m for m in messages(p, f"{TC}.total_epochs"))
    assert any("disables periodic validation" in m for m in messages(p, f"{TC}.test_freq"))


def test_hydra_and_defaults_are_never_changed() -> None:
    for path in CORPUS.glob("*.yaml"):
        p = plan(path.name)
        assert not [c for c in p.changes if c.key.split(".")[0] in ("hydra", "defaults")], path.name


def test_structure_errors() -> None:
    self_first = plan("self_not_last.yaml")
    assert not self_first.ok and any("_self_" in m for m in messages(self_first, "defaults"))
    no_hydra = plan("no_hydra.yaml")
    assert {pr.field for pr in no_hydra.problems if pr.level == Level.error} == {"hydra", "defaults"}
    legacy = plan("legacy_astuner_root.yaml")
    assert not legacy.ok and legacy.changes == []
    assert "astuner" in messages(legacy, "ajet")[0]


def test_broken_yaml_is_an_error_not_an_exception() -> None:
    broken = (corpus("broken_syntax.yaml"), "", "- a\n- b\n", "just text", "ajet: [1, 2", "\x00",
              "!!python/object:os.system {}")
    for text in broken:
        p = plan(text=text)
        assert not p.ok, text
        assert p.changes == []
        assert p.command.endswith("benchmark_math.yaml")  # the command is still planned


def test_swarm_mode_leaves_val_before_train_alone() -> None:
    text = corpus("benchmark_math.yaml").replace("  execute_test: True",
                                                 "  enable_swarm_mode: True\n  execute_test: True")
    p = plan(text=text)
    assert f"{TC}.val_before_train" not in changes(p)
    assert messages(p, f"{TC}.val_before_train")


def test_command_problems() -> None:
    no_conf = plan(command="python -m ajet.launcher --with-ray")
    assert not no_conf.ok and "without --conf" in messages(no_conf, "exp_launch_command")[0]
    script = plan(command="bash run.sh")
    assert script.ok and "no launcher call is visible" in messages(script, "exp_launch_command")[0]
    other = plan(command="python -m ajet.launcher --conf tests/bench/other.yaml")
    assert "is not exp_yaml_path" in messages(other, "exp_launch_command")[0]
    moved = plan(command="cd tests && python -m ajet.launcher --conf corpus/yaml/benchmark_math.yaml",
                 exp_yaml_path="/repo/tests/corpus/yaml/benchmark_math.yaml")
    assert messages(moved, "exp_launch_command") == []  # `cd` is followed
    empty = plan(command="")
    assert not empty.ok


def test_missing_result_dir_cannot_place_result_files() -> None:
    p = plan(exp_result_dir="")
    assert {pr.field for pr in p.problems if pr.level == Level.error} == {
        f"{TC}.val_print_to_markdown_file_path", f"{TC}.train_print_to_markdown_file_path"}


def test_cuda_visible_devices_smaller_than_the_run() -> None:
    p = plan(env={"SWANLAB_API_KEY": "k", "CUDA_VISIBLE_DEVICES": "0,1"})
    assert any("lists 2 GPU" in m for m in messages(p, f"{TC}.n_gpus_per_node"))


def test_gpus_needed() -> None:
    assert gpus_needed({}) == 8
    assert gpus_needed({"ajet": {"trainer_common": {"n_gpus_per_node": 4}}}) == 4
    assert gpus_needed({"ajet": {"trainer_common": {"n_gpus_per_node": 2, "nnodes": 3}}}) == 6
    assert gpus_needed({"ajet": {"trainer_common": {"n_gpus_per_node": "junk", "nnodes": 0}}}) == 8
    assert gpus_needed(yaml.safe_load(corpus("appworld_2nodes.yaml"))) == 16
    assert gpus_needed(None) == 8  # type: ignore[arg-type]


def test_plan_round_trips_as_json() -> None:
    p = plan()
    assert PreflightPlan.model_validate_json(p.model_dump_json()) == p


_yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["ajet", "trainer_common", "test_freq", "logger", "nnodes", "n_gpus_per_node", "execute_test",
                         "total_training_steps", "total_epochs", "val_print_to_markdown_file_path", "hydra",
                         "searchpath", "defaults", "experiment_name", "enable_swarm_mode"]) | st.text(max_size=5),
        inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(max_size=200), _yaml_values.map(lambda v: yaml.safe_dump(v))), st.dictionaries(
    st.sampled_from(["SWANLAB_API_KEY", "CUDA_VISIBLE_DEVICES", "SWANLAB_MODE"]), st.text(max_size=5)))
def test_plan_preflight_never_raises(text: str, env: dict) -> None:
    p = plan_preflight(blueprint(), text, env=env)
    assert isinstance(p, PreflightPlan)
    assert all(c.key.split(".")[0] not in ("hydra", "defaults") for c in p.changes)


def test_missing_local_model_path_is_a_warning_hub_ids_are_not_checked(tmp_path) -> None:
    shipped = corpus("benchmark_math.yaml")
    hub_path = "/mnt/data_cpfs/model_cache/modelscope/hub/Qwen/Qwen/Qwen2___5-7B-Instruct"
    missing = shipped.replace(hub_path, f"{tmp_path}/models/none/Qwen2")
    text = shipped.replace(hub_path, "Qwen/Qwen2.5-7B-Instruct")
    assert missing != shipped != text
    p = plan_preflight(blueprint(), missing, env={})
    [why] = messages(p, "ajet.model.path")
    assert "does not exist on this node" in why and "Model path" in why
    (tmp_path / "models/none/Qwen2").mkdir(parents=True)
    assert not messages(plan_preflight(blueprint(), missing, env={}), "ajet.model.path")
    assert not messages(plan_preflight(blueprint(), text, env={}), "ajet.model.path")


def test_check_and_a_worker_run_one_preflight_with_the_env_named(tmp_path) -> None:
    from ajet_runner.statemachine.fixes.preflight import preflight

    code = tmp_path / "code"
    (code / "conf").mkdir(parents=True)
    (code / "conf" / "x.yaml").write_text(corpus("benchmark_math.yaml"))
    venv = tmp_path / "python"
    venv.write_text("#!/bin/sh\n")
    venv.chmod(0o755)
    bp = blueprint().model_copy(update={
        "exp_codebase_dir": str(code), "exp_yaml_path": "conf/x.yaml", "exp_venv_exe": str(venv),
        "exp_launch_command": "python -m ajet.launcher --conf conf/x.yaml", "exp_result_dir": str(tmp_path / "r"),
    })
    a = preflight(bp, env={"CUDA_VISIBLE_DEVICES": "0,1"}, environment="node n1")
    b = preflight(bp, env={"CUDA_VISIBLE_DEVICES": "0,1"}, environment="this shell")
    assert a.changes == b.changes and a.problems == b.problems and a.env_decisions == b.env_decisions
    assert a.environment == "node n1"
    assert {d.variable for d in a.env_decisions} >= {"SWANLAB_API_KEY", "CUDA_VISIBLE_DEVICES"}


def test_multi_node_run_gets_with_ray_cluster_instead_of_with_ray() -> None:
    yaml_path = "tests/corpus/yaml/appworld_2nodes.yaml"
    p = plan("appworld_2nodes.yaml", env={"SWANLAB_API_KEY": "k"},
             command=f"python -m ajet.launcher --conf {yaml_path} --with-ray --with-appworld")
    assert p.command == f"python -m ajet.launcher --conf {yaml_path} --with-appworld --with-ray-cluster"
    reasons = [c.reason for c in p.command_changes]
    assert len(reasons) == 2 and "cannot be combined" in reasons[0] and "MASTER_ADDR" in reasons[1]
    again = plan("appworld_2nodes.yaml", env={"SWANLAB_API_KEY": "k"}, command=p.command)
    assert again.command == p.command and again.command_changes == []  # already right: nothing recorded


def test_single_node_run_keeps_with_ray() -> None:
    yaml_path = "tests/corpus/yaml/benchmark_math.yaml"
    p = plan(command=f"python -m ajet.launcher --conf {yaml_path} --with-ray")
    assert p.command.endswith("--with-ray") and p.nnodes == 1 and p.command_changes == []


def test_gang_shape() -> None:
    from ajet_runner.statemachine.fixes.preflight import gang_shape

    assert gang_shape({"ajet": {"trainer_common": {"n_gpus_per_node": 4, "nnodes": 2}}}) == (2, 4)
    assert gang_shape({}) == (1, 8)
