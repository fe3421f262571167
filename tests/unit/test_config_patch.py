"""The patched YAML copy: real files, every comment kept, hydra/defaults byte-identical."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ajet_runner.statemachine.fixes.preflight import plan_preflight
from ajet_runner.statemachine.fixes.repairs import set_dotted
from ajet_runner.statemachine.models import Blueprint, ConfigChange
from ajet_runner.workers.repair.config_patch import (
    PatchError,
    patch_yaml_text,
    patched_config_path,
    read_yaml_data,
    remove_patched_copy,
    write_patched_yaml,
)
from tests.load import examples

CORPUS = Path(__file__).resolve().parent.parent / "corpus" / "yaml"
VALID = ["benchmark_math.yaml", "countdown.yaml", "appworld_2nodes.yaml", "minimal_no_trainer_common.yaml",
         "flow_style.yaml"]


def change(key: str, new: object) -> ConfigChange:
    return ConfigChange(key=key, new=new, reason="test")


def block(text: str, root_key: str) -> str:
    """The lines of a top-level block, from `key:` up to the next top-level key."""
    lines = text.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{root_key}:"))
    end = next((i for i in range(start + 1, len(lines)) if lines[i][:1].isalpha()), len(lines))
    return "".join(lines[start:end])


def comments(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip().startswith("#")]


@pytest.fixture()
def workdir(tmp_path: Path) -> Path:
    for name in VALID:
        shutil.copy(CORPUS / name, tmp_path / name)
    return tmp_path


def preflight_changes(path: Path) -> list[ConfigChange]:
    bp = Blueprint(exp_codebase_dir=str(path.parent), exp_yaml_path=path.name, exp_result_dir="/results/e1",
                   exp_launch_command=f"python -m ajet.launcher --conf {path.name} --autokill")
    return plan_preflight(bp, path.read_text(encoding="utf-8"), env={}).changes


def test_patched_config_path_keeps_the_file_name_in_a_runner_folder() -> None:
    original = Path("/repo/tests/bench/benchmark_math/benchmark_math.yaml")
    folder = original.parent / ".ajet-runner"
    assert patched_config_path(original, "a1") == folder / "a1" / "benchmark_math.yaml"
    assert patched_config_path(original.with_name("b.yml"), "x/y z") == folder / "x-y-z" / "b.yaml"
    copy = patched_config_path(original, "a1")
    assert patched_config_path(copy, "a2") == folder / "a2" / "benchmark_math.yaml"
    assert patched_config_path(original, "///") == folder / "patched" / "benchmark_math.yaml"


def test_remove_patched_copy_leaves_no_empty_runner_folder(tmp_path: Path) -> None:
    original = tmp_path / "x.yaml"
    original.write_text("a: 1\n")
    copy = patched_config_path(original, "id1")
    write_patched_yaml(original, copy, [ConfigChange(key="a", old=1, new=2, reason="r")])
    assert copy.read_text() == "a: 2\n"
    remove_patched_copy(copy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.yaml"]
    remove_patched_copy(original)  # not a copy: untouched
    assert original.exists()


@pytest.mark.parametrize("name", VALID)
def test_preflight_patch_keeps_comments_hydra_defaults_and_original(workdir: Path, name: str) -> None:
    source = workdir / name
    original_bytes = source.read_bytes()
    original = original_bytes.decode("utf-8")
    changes = preflight_changes(source)
    assert changes, "the corpus YAMLs all need fixes"
    dest = patched_config_path(source, "att1")
    diff = write_patched_yaml(source, dest, changes)

    assert source.read_bytes() == original_bytes  # never modified
    patched = dest.read_text(encoding="utf-8")
    assert comments(patched) == comments(original) or name == "flow_style.yaml"
    for comment in comments(original):
        assert comment in patched, comment
    if name != "flow_style.yaml":
        assert block(patched, "hydra") == block(original, "hydra")
        assert block(patched, "defaults") == block(original, "defaults")
    expected = yaml.safe_load(original)
    for c in changes:
        set_dotted(expected, c.key, c.new)
    assert read_yaml_data(dest) == expected
    assert diff.startswith(f"--- {source}\n+++ {dest}\n")
    assert "+  " in diff or "+    " in diff
    assert not [p for p in workdir.iterdir() if p.name.endswith(".tmp")]


def test_benchmark_math_diff_is_minimal(workdir: Path) -> None:
    source = workdir / "benchmark_math.yaml"
    diff = write_patched_yaml(source, patched_config_path(source, "t"), [
        change("ajet.execute_test", False),
        change("ajet.trainer_common.test_freq", 10),
        change("ajet.trainer_common.val_before_train", True),
    ])
    removed = [line for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert removed == ["-    test_freq: 999999", "-  execute_test: True # DO NOT EDIT, THIS IS FOR TEST ROBOT"]
    assert added == ["+    test_freq: 10", "+    val_before_train: True",
                     "+  execute_test: False # DO NOT EDIT, THIS IS FOR TEST ROBOT"]


def test_quoting_style_is_kept() -> None:
    text = 'ajet:\n  project_name: "old"  # note\n  other: \'x\'\n  plain: a\n'
    out = patch_yaml_text(text, [change("ajet.project_name", "new name"), change("ajet.other", "it's"),
                                 change("ajet.plain", "true")])
    assert out == 'ajet:\n  project_name: "new name"  # note\n  other: \'it\'\'s\'\n  plain: \'true\'\n'


def test_missing_maps_are_created_with_the_file_indentation() -> None:
    text = "# c\najet:\n    model:\n        path: /m\nhydra:\n    searchpath:\n    - file://x\n"
    out = patch_yaml_text(text, [change("ajet.trainer_common.logger", "tensorboard"), change("newroot.k", 1)])
    assert out == ("# c\najet:\n    model:\n        path: /m\n    trainer_common:\n        logger: tensorboard\n"
                   "hydra:\n    searchpath:\n    - file://x\nnewroot:\n  k: 1\n")


def test_empty_and_null_values_are_filled_in_place() -> None:
    text = "ajet:\n  a:   # explain\n  b: null\n  c: ~\n  d:\n"
    out = patch_yaml_text(text, [change("ajet.a", "/x/y.md"), change("ajet.b", 1), change("ajet.c", 2.5),
                                 change("ajet.d", [1, 2])])
    assert out == "ajet:\n  a: /x/y.md   # explain\n  b: 1\n  c: 2.5\n  d: [1, 2]\n"


def test_non_scalar_replacement_and_scalar_in_the_way_fall_back_to_round_trip() -> None:
    text = "ajet:\n  # keep me\n  logger:\n    - console\n    - swanlab\n  tc: 5\n"
    out = patch_yaml_text(text, [change("ajet.logger", "tensorboard"), change("ajet.tc.deep", 1)])
    assert yaml.safe_load(out) == {"ajet": {"logger": "tensorboard", "tc": {"deep": 1}}}
    assert "# keep me" in out


def test_crlf_files_stay_crlf(tmp_path: Path) -> None:
    source = tmp_path / "w.yaml"
    source.write_bytes(b"ajet:\r\n  trainer_common:\r\n    test_freq: 5\r\n")
    dest = patched_config_path(source, "1")
    write_patched_yaml(source, dest, [change("ajet.trainer_common.test_freq", 10),
                                      change("ajet.trainer_common.logger", "tensorboard")])
    assert dest.read_bytes() == b"ajet:\r\n  trainer_common:\r\n    test_freq: 10\r\n    logger: tensorboard\r\n"


def test_refuses_to_overwrite_the_source_or_a_broken_yaml(tmp_path: Path) -> None:
    source = tmp_path / "a.yaml"
    source.write_text("ajet:\n  x: 1\n", encoding="utf-8")
    with pytest.raises(PatchError):
        write_patched_yaml(source, source, [change("ajet.x", 2)])
    broken = tmp_path / "b.yaml"
    broken.write_text("ajet: [1\n", encoding="utf-8")
    dest = patched_config_path(broken, "1")
    with pytest.raises(PatchError):
        write_patched_yaml(broken, dest, [change("ajet.x", 2)])
    assert not dest.exists()
    assert source.read_text(encoding="utf-8") == "ajet:\n  x: 1\n"


def test_no_changes_gives_an_identical_copy_and_empty_diff(workdir: Path) -> None:
    source = workdir / "countdown.yaml"
    dest = patched_config_path(source, "same")
    assert write_patched_yaml(source, dest, []) == ""
    assert dest.read_bytes() == source.read_bytes()


def test_overwrites_a_previous_copy_atomically_and_keeps_mode(workdir: Path) -> None:
    source = workdir / "benchmark_math.yaml"
    os.chmod(source, 0o640)
    dest = patched_config_path(source, "a1")
    dest.parent.mkdir(parents=True)
    dest.write_text("stale", encoding="utf-8")
    write_patched_yaml(source, dest, [change("ajet.execute_test", False)])
    assert read_yaml_data(dest)["ajet"]["execute_test"] is False
    assert dest.stat().st_mode & 0o777 == 0o640


def test_read_yaml_data(tmp_path: Path) -> None:
    path = tmp_path / "x.yaml"
    path.write_text("- a\n", encoding="utf-8")
    assert read_yaml_data(path) == {}
    path.write_text("ajet: {a: 1}\n", encoding="utf-8")
    assert read_yaml_data(path) == {"ajet": {"a": 1}}
    path.write_text("ajet: [1\n", encoding="utf-8")
    with pytest.raises(yaml.YAMLError):
        read_yaml_data(path)


_keys = st.sampled_from(["ajet", "trainer_common", "logger", "test_freq", "a", "b"])
_scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=8) | st.floats(allow_nan=False)
_data = st.recursive(_scalars, lambda inner: st.dictionaries(_keys, inner, max_size=3) | st.lists(inner, max_size=2),
                     max_leaves=10)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(_keys, _data, min_size=1, max_size=3),
       st.lists(st.tuples(st.lists(_keys, min_size=1, max_size=3).map(".".join), _scalars), max_size=3),
       st.booleans())
def test_patch_is_faithful_or_refused(data: dict, edits: list, flow: bool) -> None:
    text = yaml.safe_dump(data, default_flow_style=flow, sort_keys=False)
    changes = [change(key, value) for key, value in edits]
    expected = yaml.safe_load(text)
    for c in changes:
        set_dotted(expected, c.key, c.new)
    try:
        out = patch_yaml_text(text, changes)
    except PatchError:
        return
    assert yaml.safe_load(out) == expected


def test_insert_after_a_sequence_at_its_key_indentation() -> None:
    # `data: null` would read `data:` after a whole-file round trip: equality proves the splice
    text = "ajet:\n  optim:\n    lr: 1\n    betas:\n    - 0.9\n    - 0.999\n  # next section\n  data: null\n"
    out = patch_yaml_text(text, [change("ajet.optim.eps", 1e-8)])
    assert out == ("ajet:\n  optim:\n    lr: 1\n    betas:\n    - 0.9\n    - 0.999\n    eps: 1.0e-08\n"
                   "  # next section\n  data: null\n")
