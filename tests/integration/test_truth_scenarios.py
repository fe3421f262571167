"""`ajet-runner run` telling the truth: this run's results only, console-only AgentJet, reused
result dirs, refused blueprints, a YAML outside the codebase, check == run, quoted failures."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from tests.integration.scenario import CLI, Scenario, env_for, make, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def steps(data: dict) -> list[int]:
    return [e["step"] for e in data["evaluations"]]


def console_only_reports_step_0_to_the_final_step_from_the_log(sc: Scenario) -> None:
    """A console-only run's results: its evaluations from step 0 to the final step, read from the log."""
    data = sc.results_json()
    assert steps(data) == [0, 2, 4, 6, 8]  # Initial (0), val-core step lines, Final (last progress step)
    final = data["evaluations"][-1]["metrics"]
    assert final["task_pass_rate@1"] == final["val-core/gsm8k/TGC@1"] and "task_pass_rate@4" in final
    assert data["final"]["step"] == 8 and "console log" in data["results_source"]
    assert "Where the numbers come from" in (sc.results / "experiment_report.md").read_text()
    out = subprocess.run([*CLI, "results", str(sc.results), "--json"], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert [e["step"] for e in json.loads(out.stdout)["evaluations"]] == [0, 2, 4, 6, 8]


def test_console_only_run_can_stop_on_a_plateau(tmp_path, tmux_socket) -> None:
    sc = make("console_plateau", tmp_path)
    proc = run_cli(sc, env_for(tmux_socket))  # the sample as shipped, the plateau rule's defaults
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "early_stopped", data["reason"]
    assert steps(data)[0] == 0 and max(steps(data)) < 300


def test_a_relative_val_file_with_old_lines_reports_only_this_runs_evaluations(tmp_path, tmux_socket) -> None:
    sc = make("stale_val", tmp_path)
    val = sc.codebase / "earlier_results" / "stale_val.md"
    old = val.read_text()
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert steps(data) == [0, 2, 4, 6]  # not the earlier run's steps 0..30
    assert all(e["metrics"]["mean_reward"] < 0.95 for e in data["evaluations"])
    assert val.read_text().startswith(old)  # the earlier lines are kept, AgentJet appended after them
    assert f"its first {len(old.encode())} bytes were already there" in data["results_source"]


def test_console_only_runs_report_from_the_log_and_a_reused_result_dir_keeps_the_earlier_run(tmp_path,
                                                                                              tmux_socket) -> None:
    """Two console-only runs in one result dir: the first's results come from its log (step 0 to the final
    step); the second moves the first to previous/ and links it."""
    sc = make("console_only", tmp_path)
    env = env_for(tmux_socket)
    proc = run_cli(sc, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    console_only_reports_step_0_to_the_final_step_from_the_log(sc)
    first = sc.flag()
    proc = run_cli(sc, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    second = sc.flag()
    assert second["id"] != first["id"]
    [previous] = (sc.results / "previous").iterdir()
    assert previous.name == first["finished_at"].replace(":", "-")
    assert json.loads((previous / "finish.flag").read_text())["id"] == first["id"]
    assert (previous / "logs" / "attempt-1.log").exists() and (previous / "experiment_report.md").exists()
    log = (sc.results / "logs" / "attempt-1.log").read_text()
    assert log.count("Initial validation metrics") == 1  # nothing appended to the earlier run's log
    data = sc.results_json()
    # A new experiment never resumes another's weights: the same YAML in the same minute gets the same
    # AgentJet name (and its checkpoints), so the preflight gives it its own checkpoint dir; in a later
    # minute the name differs anyway. Either way it trains from step 0 and the earlier run's evaluations
    # are not this run's.
    assert data["previous_run"] == f"previous/{previous.name}" and steps(data) == [0, 2, 4, 6, 8]
    assert [a["start_step"] for a in data["attempts"]] == [0]
    assert f"previous/{previous.name}" in (sc.results / "experiment_report.md").read_text()


def test_stale_flag_is_gone_right_after_submission(redis_url, tmp_path) -> None:
    from ajet_runner.service.submit import submit
    from ajet_runner.store.store import Store

    sc = make("console_only", tmp_path)
    sc.results.mkdir(parents=True)
    (sc.results / "finish.flag").write_text('{"id": "old", "outcome": "completed", "finished_at": "x"}')
    store = Store.from_url(redis_url)
    rec = submit(store, sc.blueprint.read_text())  # no worker: the job only waits, queued
    assert rec["state"] == "queued"
    assert not (sc.results / "finish.flag").exists()
    assert rec["previous_run"] and (sc.results / rec["previous_run"] / "finish.flag").exists()


def test_a_refused_blueprint_still_ends_with_a_report_and_a_failed_flag(tmp_path, tmux_socket) -> None:
    sc = make("console_only", tmp_path)
    sc.blueprint.write_text(sc.blueprint.read_text().replace(str(sc.codebase), str(tmp_path / "nowhere"), 1))
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # refused: its flag says failed, as exit 1 does
    assert sc.flag()["outcome"] == "failed"
    report = (sc.results / "experiment_report.md").read_text()
    assert "refused before launch" in report and "`exp_codebase_dir`" in report


def test_a_yaml_outside_the_codebase_runs(tmp_path, tmux_socket) -> None:
    sc = make("console_only", tmp_path)
    outside = tmp_path / "research" / "exp1.yaml"
    outside.parent.mkdir()
    outside.write_text((sc.codebase / "tests/bench/console_only/console_only.yaml").read_text())
    text = sc.blueprint.read_text().replace("tests/bench/console_only/console_only.yaml", str(outside))
    sc.blueprint.write_text(text)
    check = subprocess.run([*CLI, "check", str(sc.blueprint), "--json"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout
    assert any(p["field"] == "exp_yaml_path" and p["level"] == "warning" for p in json.loads(check.stdout)["problems"])
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert steps(sc.results_json()) == [0, 2, 4, 6, 8]
    # AgentJet names the run after the YAML's file name (and the launch minute): the patched copy kept it
    [saved] = (sc.codebase / "saved_experiments").glob("exp1_*/exp1.yaml")
    assert re.fullmatch(r"exp1_\d{8}_\d{4}", saved.parent.name)
    assert sc.results_json()["attempts"][0]["experiment_name"] == saved.parent.name
    assert not (outside.parent / ".ajet-runner").exists()  # the copy is cleaned up, kept in the result dir
    assert sc.results_json()["patched_yaml_path"] == str(sc.results / "config.patched.yaml")


def test_check_json_and_the_runs_recorded_preflight_list_the_same_changes(tmp_path, tmux_socket) -> None:
    sc = make("console_only", tmp_path)
    yaml_path = sc.codebase / "tests/bench/console_only/console_only.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("logger: tensorboard", "logger: swanlab"))
    env = env_for(tmux_socket, SWANLAB_MODE="offline")  # AgentJet only looks at SWANLAB_API_KEY
    env.pop("SWANLAB_API_KEY", None)
    check = subprocess.run([*CLI, "check", str(sc.blueprint), "--json"], capture_output=True, text=True,
                           env=env, check=False)
    doc = json.loads(check.stdout)
    proc = run_cli(sc, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    key = lambda c: (c["key"], json.dumps(c["new"]))  # noqa: E731
    assert sorted(map(key, doc["config_changes"])) == sorted(map(key, data["preflight_changes"]))
    assert ("ajet.trainer_common.logger", '"console"') in map(key, doc["config_changes"])
    assert [d["variable"] for d in doc["env_decisions"]] == [d["variable"] for d in data["preflight_env"]["decisions"]]
    assert "this shell" in doc["environment"] and "node" in data["preflight_env"]["environment"]


def test_an_unrepairable_new_signature_fails_with_the_log_line_quoted(tmp_path, tmux_socket) -> None:
    sc = make("console_only", tmp_path)
    yaml_path = sc.codebase / "tests/bench/console_only/console_only.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("ajet_sim:\n", "ajet_sim:\n  fail:\n"
                                                       "    signature: python_module_missing\n"))
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "failed" and len(data["attempts"]) == 1
    assert data["repairs"][0]["signature"] == "python_module_missing"
    assert "ModuleNotFoundError: No module named 'ray'" in data["reason"]


def test_a_result_dir_in_use_by_a_live_experiment_is_refused_and_left_alone(redis_url, tmp_path) -> None:
    from ajet_runner.service.submit import SubmissionRejected, submit
    from ajet_runner.store.store import Store

    sc = make("console_only", tmp_path)
    store = Store.from_url(redis_url)
    first = submit(store, sc.blueprint.read_text())  # no worker: it stays queued, unfinished
    (sc.results / "logs").mkdir(parents=True, exist_ok=True)
    live_log = sc.results / "logs" / "attempt-1.log"
    live_log.write_text("the first run's live log\n")
    with pytest.raises(SubmissionRejected) as err:
        submit(store, sc.blueprint.read_text())
    assert err.value.status == 409
    assert first["id"] in str(err.value) and "exp_result_dir" in str(err.value.problems[0].field)
    assert live_log.read_text() == "the first run's live log\n"  # nothing moved to previous/
    assert not (sc.results / "previous").exists() and not (sc.results / "finish.flag").exists()
