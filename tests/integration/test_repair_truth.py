"""Repairs a researcher can trust, end to end through `ajet-runner run` (real embedded Redis, real tmux,
the simulated AgentJet): no identical relaunch, a truthful repair log, an honest GPU check, resumes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.scenario import Scenario, env_for, make, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAKES = Path(__file__).resolve().parent.parent / "fakes" / "bin"
GPU = "81559"


def with_fake_gpus(env: dict[str, str], spec: str) -> dict[str, str]:
    """The fake nvidia-smi first on PATH, reporting `spec` (total:used MiB per GPU)."""
    return {**env, "PATH": f"{FAKES}:{env['PATH']}", "AJET_FAKE_GPUS": spec}


def attempt_log(sc: Scenario, n: int) -> str:
    return (sc.results / "logs" / f"attempt-{n}.log").read_text(errors="replace")


def test_a_stale_ray_head_not_ours_is_reused_never_relaunched_identically(tmp_path, tmux_socket) -> None:
    sc = make("stale_ray", tmp_path)
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed"
    commands = [a["command"] for a in data["attempts"]]
    assert len(commands) == 2 and "--with-ray" in commands[0] and "--with-ray" not in commands[1]
    [repair] = data["repairs"]
    assert repair["signature"] == "ray_already_running" and repair["result"] == "relaunched"
    assert repair["changes"] == ["remove --with-ray from the launcher (reuse the Ray head that is already running "
                                 "instead of starting one)"]
    log = (sc.results / "repair_log.md").read_text()
    assert "no process of this experiment is running" in log and "clean up ray before" not in log


def test_the_stale_ray_case_ends_failed_naming_the_identical_attempt_when_no_fix_can_apply(
        tmp_path, tmux_socket) -> None:
    sc = make("stale_ray", tmp_path)
    # the launcher runs inside a script the runner does not rewrite: --with-ray cannot be dropped there
    script = sc.codebase / "train_with_ray.sh"
    script.write_text("#!/bin/sh\nexec python -m ajet.launcher --conf tests/bench/stale_ray/stale_ray.yaml "
                      "--backbone verl --with-ray\n")
    text = sc.blueprint.read_text()
    launch = re.search(r"```bash\n(.*?)\n```", text, re.S)
    assert launch is not None
    sc.blueprint.write_text(text.replace(launch.group(1), "bash train_with_ray.sh"))
    proc = run_cli(sc, env_for(tmux_socket, AJET_RUNNER_REPAIR_BUDGET="5", AJET_RUNNER_REPAIR_BUDGET_PER_SIGNATURE="5"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "failed" and len(data["attempts"]) == 1  # not even a second, equal attempt
    [repair] = data["repairs"]
    assert repair["signature"] == "ray_already_running" and repair["result"] == "no applicable change"
    assert repair["identical_to"] == 1 and repair["changes"] == []
    assert "attempt 1 already ran exactly this" in data["reason"]
    assert any("does not run ajet.launcher" in s for s in repair["skipped"])
    log = (sc.results / "repair_log.md").read_text()
    assert "would have repeated attempt 1 exactly" in log


def test_an_oom_at_step_5_relaunches_and_the_trainer_resumes_at_its_step_4_checkpoint(tmp_path, tmux_socket) -> None:
    sc = make("oom_resume", tmp_path)
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 2
    first, second = data["attempts"]
    assert re.fullmatch(r"oom_resume_\d{8}_\d{4}", first["experiment_name"])
    assert second["experiment_name"] == first["experiment_name"]  # pinned: the same experiment
    assert (first["start_step"], second["start_step"]) == (0, 4)
    assert second["resumed_from"].endswith(f"saved_checkpoints/benchmarking/{first['experiment_name']}/global_step_4")
    assert "Setting global step to 4" in attempt_log(sc, 2)
    [repair] = data["repairs"]
    pin = [c for c in repair["changes"] if c.startswith("set ajet.experiment_name")]
    assert pin and f"-> '{first['experiment_name']}'" in pin[0] and "global_step_4" in pin[0]
    # one curve: attempt 1's steps 0, 2; attempt 2 from its checkpoint on (4 evaluated again, then 6, 8)
    assert [(e["step"], e["attempt"]) for e in data["evaluations"]] == [(0, 1), (2, 1), (4, 2), (6, 2), (8, 2)]
    assert {(e["attempt"], e["step"]) for e in data["superseded_evaluations"]} == {(1, 4)}
    assert [s["how"] for s in data["attempt_starts"]] == ["from scratch", "resumed"]
    report = (sc.results / "experiment_report.md").read_text()
    assert "4 (resumed from" in report
    # the report's evaluation table names each row's attempt (issue 41: a repaired run's evaluations)
    table = report[report.index("| step | attempt | dataset |"):].split("\n\n", 1)[0].splitlines()[2:]
    assert [tuple(row.strip("| ").split(" | ")[:2]) for row in table] == [
        ("0", "1"), ("2", "1"), ("4", "2"), ("6", "2"), ("8", "2")], table
    # the user's YAML never named the experiment, and still does not
    assert "experiment_name" not in (sc.codebase / "tests/bench/oom_resume/oom_resume.yaml").read_text()


def test_busy_gpu_with_unmanaged_gpus_is_confined_to_the_free_ones_and_the_log_says_which(
        tmp_path, tmux_socket) -> None:
    sc = make("busy_gpu", tmp_path)
    env = with_fake_gpus(env_for(tmux_socket, AJET_RUNNER_GPUS="0"), f"{GPU}:48000,{GPU}:0,{GPU}:0,{GPU}:0")
    proc = run_cli(sc, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 2
    warning = [p["message"] for p in data["preflight_problems"] if "all-GPUs check back on" in p["message"]]
    assert warning and "the launcher will check its rule" in warning[0]  # not known: the launcher's check runs
    assert "GPU memory check failed" in attempt_log(sc, 1)
    [repair] = data["repairs"]
    assert repair["signature"] == "gpu_busy"
    assert any(c.startswith("set env CUDA_VISIBLE_DEVICES=1,2: confined the run to GPU(s) 1,2") for c in
               repair["changes"])
    second = data["attempts"][1]
    assert (second.get("inputs") or {}).get("env", {}).get("CUDA_VISIBLE_DEVICES") == "1,2"
    assert "--skip-check-avail-gpu" in second["command"] and "--autokill" not in second["command"]
    assert "GPU(s) 1,2 checked before launch" in second["gpu_check"] and "all at least 95 % free" in second["gpu_check"]
    log = (sc.results / "repair_log.md").read_text()
    assert "CUDA_VISIBLE_DEVICES=1,2" in log and "GPU 0: 41.1 % free" in log


def test_autokill_stripped_on_managed_gpus_skips_the_launchers_check_and_the_runner_checks_them(
        tmp_path, tmux_socket) -> None:
    sc = make("busy_gpu", tmp_path)
    # GPU 3 is busy with someone else's job; this run gets GPUs 0 and 1 from the node
    env = with_fake_gpus(env_for(tmux_socket, AJET_RUNNER_GPUS="4"), f"{GPU}:0,{GPU}:0,{GPU}:0,{GPU}:48000")
    proc = run_cli(sc, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 1 and data["repairs"] == []
    [attempt] = data["attempts"]
    assert "--skip-check-avail-gpu" in attempt["command"] and "--autokill" not in attempt["command"]
    reasons = [c["reason"] for c in data["preflight_changes"] if "--skip-check-avail-gpu" in str(c.get("new"))]
    assert reasons and "--autokill/--kill was removed" in reasons[0] and "checks GPUs 0,1 itself" in reasons[0]
    assert attempt["gpu_check"].startswith("GPU(s) 0,1 checked before launch (nvidia-smi: GPU 0: 100.0 % free")
    assert "GPU memory check failed" not in attempt_log(sc, 1)
