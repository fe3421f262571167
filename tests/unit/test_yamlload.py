"""The cached YAML loader hands out private copies equal to a fresh safe load."""

from __future__ import annotations

import datetime
import os
from pathlib import Path

import yaml

from ajet_runner.statemachine.blueprint.yamlload import load_yaml_file

DOC = """\
trainer:
  n_gpus_per_node: 4
  nnodes: 1
  tags: [a, b]
  when: 2026-12-01
  ratio: 0.5
  flags: !!set {x, y}
  blob: !!binary aGVsbG8=
defaults: &d {lr: 0.1}
actor: *d
"""


def test_a_cached_load_equals_a_fresh_one_and_is_private(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(DOC)
    first = load_yaml_file(path)
    assert first == yaml.safe_load(DOC)
    assert first["trainer"]["when"] == datetime.date(2026, 12, 1) and first["trainer"]["flags"] == {"x", "y"}
    first["trainer"]["tags"].append("changed")
    first["trainer"]["flags"].add("z")
    first["defaults"]["lr"] = 9
    second = load_yaml_file(path)  # from the cache
    assert second == yaml.safe_load(DOC)
    assert second["trainer"] is not first["trainer"]


def test_a_changed_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("a: 1\n")
    assert load_yaml_file(path) == {"a": 1}
    path.write_text("a: 22\n")
    os.utime(path, ns=(1, 1))  # a different mtime even within the clock's resolution
    assert load_yaml_file(path) == {"a": 22}


def test_a_self_referencing_document_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "loop.yaml"
    path.write_text("a: &x [1, *x]\n")
    data = load_yaml_file(path)
    assert data["a"][0] == 1 and data["a"][1] is data["a"]
    again = load_yaml_file(path)
    assert again["a"] is not data["a"] and again["a"][1] is again["a"]
