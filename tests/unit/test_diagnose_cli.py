"""`ajet-runner diagnose`, run as a real process: the JSON contract and the exit codes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import CORPUS, run_cli

LOGS = CORPUS / "logs"
FINDING_KEYS = {"signature", "fatal", "line", "text", "explanation", "repair"}
ACTION_KINDS = {"set_yaml", "set_env", "prefix_command", "add_flag", "remove_flag", "cleanup"}


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return run_cli("diagnose", *args)


def run_json(log: Path) -> dict[str, Any]:
    proc = run(str(log), "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_shape(doc: dict[str, Any]) -> None:
    assert isinstance(doc["completed_run"], bool)
    assert isinstance(doc["findings"], list)
    lines = [f["line"] for f in doc["findings"]]
    assert lines == sorted(lines)
    for finding in doc["findings"]:
        assert set(finding) >= FINDING_KEYS
        assert isinstance(finding["signature"], str) and isinstance(finding["fatal"], bool)
        assert isinstance(finding["line"], int) and finding["line"] >= 1
        assert isinstance(finding["text"], str) and isinstance(finding["explanation"], str)
        assert isinstance(finding["repair"], list)
        for action in finding["repair"]:
            assert isinstance(action, dict) and action["kind"] in ACTION_KINDS
    first_fatal = next((f["signature"] for f in doc["findings"] if f["fatal"]), None)
    assert doc["cause"] == first_fatal


def test_json_names_the_cause_and_its_plan() -> None:
    doc = run_json(LOGS / "cuda_oom_ray.log")
    assert_shape(doc)
    assert doc["completed_run"] is False
    assert doc["cause"] == "cuda_oom"
    cause = next(f for f in doc["findings"] if f["fatal"])
    assert cause["line"] == 19 and "CUDA out of memory" in cause["text"]
    assert {"kind": "set_env", "key": "PYTORCH_CUDA_ALLOC_CONF"}.items() <= cause["repair"][0].items()
    assert [f["signature"] for f in doc["findings"]] == ["cuda_oom", "subprocess_failed"]
    assert doc["findings"][0]["count"] == 2


def test_json_for_a_completed_run_has_no_cause() -> None:
    doc = run_json(LOGS / "success_actor_died.log")
    assert_shape(doc)
    assert doc["completed_run"] is True
    assert doc["cause"] is None
    assert [(f["signature"], f["fatal"]) for f in doc["findings"]] == [("ray_actor_died", False)]


@pytest.mark.parametrize("name", ["hang_no_error.log", "zh_host_oom.log", "unknown_traceback.log"])
def test_json_shape_holds_across_the_corpus(name: str) -> None:
    assert_shape(run_json(LOGS / name))


def test_crlf_and_no_trailing_newline(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    log.write_bytes(b"starting\r\n(TaskRunner pid=3) AssertionError: Model path /m/q does not exist. Please check"
                    b"\r\nKilled")
    doc = run_json(log)
    assert doc["line_count"] == 3
    assert [(f["signature"], f["line"], f["fatal"]) for f in doc["findings"]] == [
        ("model_path_missing", 2, True),
        ("host_oom", 3, True),
    ]
    assert doc["cause"] == "model_path_missing"
    assert doc["findings"][0]["repair"] == []


def test_readable_output_names_the_cause_and_the_plan() -> None:
    proc = run(str(LOGS / "gpu_busy.log"))
    assert proc.returncode == 0, proc.stderr
    assert "Cause: gpu_busy" in proc.stdout
    assert "--skip-check-avail-gpu" in proc.stdout
    assert "clean up gpu_processes" in proc.stdout


def test_readable_output_for_an_unrepairable_cause() -> None:
    proc = run(str(LOGS / "model_path_missing.log"))
    assert proc.returncode == 0, proc.stderr
    assert "Cause: model_path_missing" in proc.stdout
    assert "Not repairable" in proc.stdout


def test_missing_file_is_a_clear_error_with_exit_2(tmp_path: Path) -> None:
    missing = tmp_path / "nope.log"
    proc = run(str(missing), "--json")
    assert proc.returncode == 2
    assert "no such log file" in proc.stderr and str(missing) in proc.stderr
    assert proc.stdout == ""
