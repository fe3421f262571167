"""A launcher the command does not show (`bash scripts/train.sh`, `make`, a wrapper): `check`, the preflight, the
repairs and the report say so and claim no change the process did not receive (issue 36 item 2)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from ajet_runner.statemachine.blueprint.parse import parse_blueprint
from ajet_runner.statemachine.fixes.preflight import preflight
from ajet_runner.statemachine.shell.script_launcher import MAX_SCRIPT_BYTES, hidden_launcher
from ajet_runner.store.records import ExperimentRecord
from ajet_runner.store.store import Store
from ajet_runner.workers.drive.driver import ExperimentDriver
from ajet_runner.workers.identity.this_node import NodeInfo
from tests.doubles import InMemoryRunner, Script, blueprint_text, seed, settings_for

SCRIPT = ("#!/bin/bash\nset -e\nexport HF_HOME=/data/hf\npython -m ajet.launcher \\\n"
          "  --conf conf.yaml --backbone verl\n")
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


def write_script(code: Path, text: str = SCRIPT) -> None:
    (code / "scripts").mkdir(parents=True, exist_ok=True)
    (code / "scripts" / "train.sh").write_text(text, encoding="utf-8")


@pytest.mark.parametrize(("command", "runs", "line"), [
    ("bash scripts/train.sh", "bash scripts/train.sh", 4),
    ("cd . && bash -x scripts/train.sh --fast", "bash -x scripts/train.sh", 4),
    ("./scripts/train.sh", "./scripts/train.sh", 4),
    ("source scripts/train.sh", "source scripts/train.sh", 4),
    ("make train", "make train", 2),
])
def test_the_script_that_runs_the_launcher_is_read_and_named(tmp_path: Path, command: str, runs: str,
                                                             line: int) -> None:
    write_script(tmp_path)
    (tmp_path / "Makefile").write_text("train:\n\t@python -m ajet.launcher --conf conf.yaml\n", encoding="utf-8")
    found = hidden_launcher(command, str(tmp_path))
    assert found is not None and found.runs == runs and found.line == line and found.conf == "conf.yaml"
    assert "python -m ajet.launcher" in found.launcher and not found.problem
    assert "no preflight change applies" in found.sentence()
    where = "Makefile" if runs.startswith("make") else "scripts/train.sh"
    assert f"({where} line {line}: `python -m ajet.launcher " in found.sentence()  # relative to the codebase


def test_what_cannot_be_read_is_said_and_a_visible_launcher_needs_no_reading(tmp_path: Path) -> None:
    assert hidden_launcher("python -m ajet.launcher --conf a.yaml", str(tmp_path)) is None
    assert hidden_launcher("echo hi && sleep 1", str(tmp_path)) is None
    missing = hidden_launcher("bash scripts/nope.sh", str(tmp_path))
    assert missing is not None and missing.problem == "No such file or directory"
    write_script(tmp_path, "x" * (MAX_SCRIPT_BYTES + 1))
    big = hidden_launcher("bash scripts/train.sh", str(tmp_path))
    assert big is not None and "more than the" in big.problem
    (tmp_path / "scripts" / "train.sh").write_bytes(b"python -m ajet.launcher --conf \xff.yaml\n")
    binary = hidden_launcher("bash scripts/train.sh", str(tmp_path))
    assert binary is not None and binary.problem.startswith("not UTF-8")
    wrapper = hidden_launcher("mytrain --conf a.yaml", str(tmp_path))
    assert wrapper is not None and "a program the runner cannot look into" in wrapper.sentence()
    write_script(tmp_path, "echo nothing here\n")
    empty = hidden_launcher("bash scripts/train.sh", str(tmp_path))
    assert empty is not None and "no launcher call was found" in empty.sentence()


def test_the_preflight_plans_no_change_for_a_script_and_says_what_it_would_have_changed(tmp_path: Path) -> None:
    bp = parse_blueprint(blueprint_text(tmp_path, "bash scripts/train.sh"))
    code = tmp_path / "code"
    write_script(code)
    conf = code / "conf.yaml"
    conf.write_text(conf.read_text().replace("val_before_train: True", "val_before_train: False")
                    .replace("execute_test: False", "execute_test: True"))
    plan = preflight(bp, env={"PATH": "/usr/bin:/bin"}, environment="the test")
    assert plan.changes == [] and plan.command_changes == [] and plan.command == "bash scripts/train.sh"
    assert plan.launcher_hidden.startswith("no launcher call is visible in the command: it runs "
                                           "`bash scripts/train.sh`, which calls the launcher")
    fields = {p.field: p.message for p in plan.problems}
    assert fields["exp_launch_command"] == plan.launcher_hidden
    assert fields["ajet.execute_test"].startswith("not changed (the launcher is not in the command")
    assert fields["ajet.trainer_common.val_before_train"].startswith("not changed")
    assert plan.val_result_path == "" and plan.ok  # the YAML names no results file: the console log is read


def drive(store: Store, exp_id: str, runner: InMemoryRunner) -> tuple[str, ExperimentRecord]:
    kw = store.r.connection_pool.connection_kwargs
    url = f"redis://{kw['host']}:{kw['port']}/{kw.get('db', 0)}"
    outcome = ExperimentDriver(store, exp_id, settings_for(url, repair_backoff_scale=0.0),
                               NodeInfo(name="test-node", gpus=0, slots=1), "test/1", runner=runner).run()
    rec = store.records.get(exp_id)
    assert rec is not None
    return outcome, rec


def results(tmp_path: Path) -> dict[str, Any]:
    return json.loads((tmp_path / "results" / "results.json").read_text())


def test_a_run_through_a_script_claims_no_change_in_the_report_nor_in_a_repair(
        redis_url: str, tmp_path: Path) -> None:
    store = Store.from_url(redis_url)
    exp_id = uuid.uuid4().hex[:12]
    seed(store, exp_id, tmp_path, command="bash scripts/train.sh")
    code = tmp_path / "code"
    write_script(code)
    conf = code / "conf.yaml"
    conf.write_text(conf.read_text().replace("val_before_train: True", "val_before_train: False"))
    runner = InMemoryRunner(Script(["starting", "Traceback (most recent call last):", OOM], exit_code=1),
                            Script(["Training Progress: 100%"], exit_code=0))
    outcome, rec = drive(store, exp_id, runner)
    assert outcome == "completed"
    assert [s.command for s in runner.started] == ["bash scripts/train.sh"] * 2  # never rewritten
    assert rec.ctx.config_path == str(conf) and not list(code.glob(".ajet-runner/*/*.yaml"))
    [repair] = rec.ctx.repairs
    assert not any(c.startswith(("set ajet.", "unset ajet.")) for c in repair.changes), repair.changes
    assert any("would not reach it" in s for s in repair.skipped)
    data = results(tmp_path)
    assert data["preflight_changes"] == [] and data["patched_yaml_path"] == ""
    assert data["launcher_hidden"].startswith("no launcher call is visible in the command")
    report = (tmp_path / "results" / "experiment_report.md").read_text()
    assert "| YAML (as run) | as the script names it (the runner changed nothing: see Preflight) |" in report
    assert "No preflight change applied: no launcher call is visible in the command" in report
    assert "config.patched.yaml" not in report and "val_before_train` | " not in report
    assert "No preflight change applied" in (tmp_path / "results" / "repair_log.md").read_text()
