"""`ajet-runner check BLUEPRINT [--json]` through the real console script: JSON shape and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import run_cli

BLUEPRINT_KEYS = {
    "exp_purpose", "exp_codebase_dir", "exp_venv_exe", "exp_yaml_path", "exp_launch_command", "exp_result_dir",
    "exp_max_time_seconds", "notes",
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("check", *args)


def _check_json(path: Path) -> tuple[int, dict[str, Any]]:
    proc = _run(str(path), "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _assert_shape(doc: dict[str, Any]) -> None:
    assert set(doc) == {"blueprint", "problems", "config_changes", "environment", "env_decisions", "swarm",
                        "command_file", "sweep", "runs_on"}
    assert doc["command_file"] is None or doc["command_file"].startswith("# ajet-runner: the launch command")
    assert set(doc["blueprint"]) == BLUEPRINT_KEYS
    for p in doc["problems"]:
        assert set(p) == {"level", "field", "message"} and p["level"] in ("error", "warning") and p["message"]
    for c in doc["config_changes"]:
        assert set(c) == {"key", "old", "new", "reason"} and c["reason"]


@pytest.fixture()
def good_blueprint(tmp_path: Path) -> Path:
    code = tmp_path / "agentjet"
    (code / "tests" / "bench").mkdir(parents=True)
    (code / "tests" / "bench" / "math.yaml").write_text(
        "# benchmark config\n"
        "ajet:\n"
        "  execute_test: True\n"
        "  trainer_common:\n"
        "    val_before_train: True\n"
        "    test_freq: 10\n"
        "    logger: tensorboard\n"
        "hydra:\n  searchpath:\n    - file://ajet/default_config\n"
        "defaults:\n  - ajet_default\n  - _self_\n",
        encoding="utf-8",
    )
    path = tmp_path / "blueprint_1.md"
    path.write_text(
        f"""# 实验蓝图 1

1. [exp_purpose] 实验目的（一段文本）： 基线实验。
2. [exp_codebase_dir] 主实验代码路径（绝对路径）： {code}
3. [exp_venv_exe] python虚拟环境路径（python的绝对路径）: {sys.executable}
4. [exp_yaml_path] 实验配置文件路径（相对路径，相对于主实验代码路径）： tests/bench/math.yaml
5. [exp_launch_command] 执行训练的命令（字符串）：
   ```bash
   cd {code} && \\
     python -m ajet.launcher --conf tests/bench/math.yaml --autokill
   ```
6. [exp_result_dir] 结果数据存储路径（绝对路径）： {tmp_path / "results" / "bp1"}
7. [exp_max_time] ${{MaxTime}} = 1.5h (90 minutes)
8. 其他实验相关信息（可选）： 无
""",
        encoding="utf-8",
    )
    return path


def test_runnable_blueprint_exits_0_with_the_pinned_json(good_blueprint: Path, tmp_path: Path) -> None:
    code, doc = _check_json(good_blueprint)
    _assert_shape(doc)
    assert code == 0
    bp = doc["blueprint"]
    assert bp["exp_codebase_dir"] == str(tmp_path / "agentjet")
    assert bp["exp_venv_exe"] == sys.executable
    assert bp["exp_yaml_path"] == "tests/bench/math.yaml"
    assert bp["exp_launch_command"] == (  # as written, continuation kept
        f"cd {tmp_path / 'agentjet'} && \\\n  python -m ajet.launcher --conf tests/bench/math.yaml --autokill"
    )
    # the script that would run: the same lines, with the preflight's rewrite (no --autokill)
    assert doc["command_file"].splitlines()[1:] == [
        f"cd {tmp_path / 'agentjet'} && \\", "  python -m ajet.launcher --conf tests/bench/math.yaml"]
    assert bp["exp_result_dir"] == str(tmp_path / "results" / "bp1")
    assert bp["exp_max_time_seconds"] == 5400.0
    assert bp["exp_purpose"] == "基线实验。"
    assert bp["notes"] == "无"
    assert not [p for p in doc["problems"] if p["level"] == "error"]
    assert not (tmp_path / "results").exists()  # check creates nothing
    # The preflight plans the YAML fix; it is the other engineer's module, so only its presence is pinned here.
    keys = {c["key"] for c in doc["config_changes"]}
    assert "ajet.execute_test" in keys


def test_broken_blueprint_exits_1_and_names_each_problem(tmp_path: Path) -> None:
    path = tmp_path / "broken.md"
    path.write_text(
        "## [exp_purpose]\nTry it.\n\n## [exp_codebase_dir]\nagentjet/\n\n"
        f"## [exp_venv_exe]\n{tmp_path / 'no-venv' / 'bin' / 'python'}\n\n"
        "## [exp_yaml_path]\nconf/x.yaml\n\n## [exp_max_time]\nuntil it converges\n",
        encoding="utf-8",
    )
    code, doc = _check_json(path)
    _assert_shape(doc)
    assert code == 1
    errors = {(p["field"]) for p in doc["problems"] if p["level"] == "error"}
    assert errors == {"exp_codebase_dir", "exp_venv_exe", "exp_launch_command", "exp_result_dir", "exp_max_time"}
    assert doc["blueprint"]["exp_max_time_seconds"] is None
    assert doc["config_changes"] == []
    messages = " | ".join(p["message"] for p in doc["problems"])
    assert "'agentjet/'" in messages and "until it converges" in messages and "does not exist" in messages


def test_unreadable_blueprint_exits_2_with_a_problem(tmp_path: Path) -> None:
    code, doc = _check_json(tmp_path / "missing.md")
    _assert_shape(doc)
    assert code == 2  # missing input: the same code as results, diagnose and the client commands
    assert [p["field"] for p in doc["problems"]] == ["blueprint"]


def test_dash_reads_the_blueprint_from_stdin(good_blueprint: Path) -> None:
    proc = run_cli("check", "-", "--json", input=good_blueprint.read_text())
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["blueprint"]["exp_codebase_dir"]


def test_readable_output_without_json(good_blueprint: Path, tmp_path: Path) -> None:
    proc = _run(str(good_blueprint))
    assert proc.returncode == 0, proc.stderr
    assert "runnable" in proc.stdout and "exp_codebase_dir" in proc.stdout
    shown = proc.stdout.split("Command file", 1)[1]  # the exact script: the rewrite is visible
    assert "python -m ajet.launcher --conf tests/bench/math.yaml" in shown and "--autokill" not in shown
    broken = tmp_path / "empty.md"
    broken.write_text("nothing here\n", encoding="utf-8")
    proc = _run(str(broken))
    assert proc.returncode == 1
    assert "not runnable" in proc.stdout and "missing" in proc.stdout


def test_an_environment_decision_says_set_or_not_set_once() -> None:
    from ajet_runner.cli.commands.check_command import _decision

    assert _decision({"is_set": False, "decision": "not set: the run sees every GPU of the node"}) == \
        "the run sees every GPU of the node"  # printed after `CUDA_VISIBLE_DEVICES not set: `
    assert _decision({"is_set": True, "decision": "set: logger swanlab kept"}) == "logger swanlab kept"
    assert _decision({"is_set": True, "decision": "lists 2 GPU(s) for n_gpus_per_node=2"}) == \
        "lists 2 GPU(s) for n_gpus_per_node=2"


def test_a_launcher_inside_a_script_is_said_and_check_plans_no_change(good_blueprint: Path, tmp_path: Path) -> None:
    """Issue 36 item 2: `check` says no launcher call is visible and that no preflight change applies; the
    YAML fixes it would make for a visible launcher are not planned, and the command file is the command."""
    code = tmp_path / "agentjet"
    (code / "scripts").mkdir()
    (code / "scripts" / "train.sh").write_text(
        "#!/bin/bash\nset -e\npython -m ajet.launcher --conf tests/bench/math.yaml --autokill\n", encoding="utf-8")
    text = good_blueprint.read_text(encoding="utf-8")
    script = good_blueprint.with_name("script.md")
    script.write_text(text.replace(f"cd {code} && \\\n     python -m ajet.launcher --conf tests/bench/math.yaml "
                                   "--autokill", f"cd {code} && bash scripts/train.sh"), encoding="utf-8")
    rc, doc = _check_json(script)
    _assert_shape(doc)
    assert rc == 0 and doc["blueprint"]["exp_launch_command"] == f"cd {code} && bash scripts/train.sh"
    assert doc["config_changes"] == []  # execute_test: True is left as the script's YAML has it
    [hidden] = [p["message"] for p in doc["problems"] if p["field"] == "exp_launch_command"]
    assert hidden.startswith("no launcher call is visible in the command: it runs `bash scripts/train.sh`, "
                             "which calls the launcher (scripts/train.sh line 3: `python -m ajet.launcher")
    assert "no preflight change applies" in hidden
    assert doc["command_file"].splitlines()[1:] == [f"cd {code} && bash scripts/train.sh"]  # --autokill not touched
    shown = _run(str(script)).stdout
    assert "no launcher call is visible in the command" in shown and "runnable" in shown
