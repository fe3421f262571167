"""The first-step watchdog through the real `ajet-runner run` on a classic blueprint."""

from __future__ import annotations

import pytest

from tests.integration.scenario import env_for, make, marked_processes, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_classic_run_without_a_training_step_fails_with_first_step_timeout(tmp_path, tmux_socket) -> None:
    sc = make("hang", tmp_path)
    yaml_path = sc.codebase / "tests/bench/hang/hang.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("hang_at_step: 3", "hang_at_step: 0"))
    sc.blueprint.write_text(sc.blueprint.read_text().replace(
        "**[exp_max_time]**: 1 minute", "**[exp_max_time]**: 1 minute. First step success timeout: 6 seconds"))
    proc = run_cli(sc, env_for(tmux_socket))
    data = sc.results_json()
    assert data["outcome"] == "failed", proc.stdout + proc.stderr
    assert len(data["attempts"]) == 1
    assert [r["signature"] for r in data["repairs"]] == ["first_step_timeout"]
    assert "first-step timeout of 6s" in data["reason"] or "first_step_timeout" in data["reason"]
    assert marked_processes(sc.flag()["id"]) == []
