"""`ajet-runner run` end to end: real embedded Redis, real tmux, the simulated AgentJet."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import pytest

from tests.integration.scenario import CLI, env_for, make, marked_processes, run_cli, short_sim, wait_for
from tests.integration.test_cli_terminal import assert_plain

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def evaluations_steps(data: dict) -> list[int]:
    return [e["step"] for e in data["evaluations"]]


def test_demo_completes_with_report_and_flag_and_its_pane_lingers_as_configured(tmp_path, tmux_socket) -> None:
    """The demo as shipped, end to end; one run checks the finished pane's linger too
    (AJET_RUNNER_PANE_LINGER_SECONDS: how long a finished attempt's pane stays open to be attached to)."""
    sc = make("demo", tmp_path)
    proc = run_cli(sc, env_for(tmux_socket, AJET_RUNNER_PANE_LINGER_SECONDS="2"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Job submitted: " in proc.stdout
    # Into a pipe (a CI log): the event lines and the result, no drawn progress bar, no padded line (issue 41)
    assert_plain(proc.stdout + proc.stderr, "run into a pipe")
    assert "  evaluation at step 0: " in proc.stdout, proc.stdout
    flag = sc.flag()
    assert flag["outcome"] == "completed" and set(flag) >= {"id", "outcome", "finished_at"}
    data = sc.results_json()
    assert evaluations_steps(data)[0] == 0 and len(data["attempts"]) == 1
    for name in ("experiment_report.md", "repair_log.md", "reward_plot.png", "logs/attempt-1.log"):
        assert (sc.results / name).exists(), name
    assert "ajet" in data["tmux_session"]
    assert marked_processes(flag["id"]) == []
    session = re.search(r"attach -t (\S+)", proc.stdout).group(1)  # type: ignore[union-attr]

    def has_session() -> bool:
        return subprocess.run(["tmux", "-S", tmux_socket, "has-session", "-t", session], capture_output=True,
                              check=False).returncode == 0

    wait_for(lambda: not has_session(), 30, "the pane to close after its 2 s linger (the default is 300 s)")


def test_preflight_fixes_execute_test_and_val_path_keeping_the_users_yaml(tmp_path, tmux_socket) -> None:
    sc = make("execute_test_on", tmp_path)
    yaml_path = sc.codebase / "tests/bench/execute_test_on/execute_test_on.yaml"
    # As shipped it trains for 100 epochs; a few steps are enough to see the preflight's effect.
    yaml_path.write_text(yaml_path.read_text().replace("    total_epochs: 100\n",
                                                       "    total_epochs: 100\n    total_training_steps: 6\n"))
    original = yaml_path.read_bytes()
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert yaml_path.read_bytes() == original  # the user's file, comments and all, untouched
    data = sc.results_json()
    keys = {c["key"] for c in data["preflight_changes"]}
    assert "ajet.execute_test" in keys and "ajet.trainer_common.val_print_to_markdown_file_path" in keys
    assert evaluations_steps(data)[0] == 0  # a step-0 baseline
    patched = (sc.results / "config.patched.yaml").read_text()
    original_comments = [ln for ln in original.decode().splitlines() if ln.strip().startswith("#")]
    assert original_comments and all(c in patched for c in original_comments)
    assert not list(yaml_path.parent.glob("*.ajet-runner-*.yaml"))  # no copy left in the codebase


@pytest.mark.parametrize(("template", "signature"), [("oom_first_attempt", "cuda_oom"),
                                                     ("network_first_attempt", "network_unreachable")])
def test_first_attempt_crash_is_repaired_and_completes_on_attempt_2(tmp_path, tmux_socket, template, signature):
    sc = make(template, tmp_path)
    env = env_for(tmux_socket, AJET_RUNNER_REPAIR_BACKOFF_SCALE="0.05")  # a network relaunch waits 60 s × 0.05
    env["PATH"] = f"{sc.codebase / 'bin'}:{env['PATH']}"  # the sim's proxychains4
    proc = run_cli(sc, env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "completed" and len(data["attempts"]) == 2
    assert [r["signature"] for r in data["repairs"]] == [signature]
    assert data["repairs"][0]["result"] == "relaunched"
    log = (sc.results / "repair_log.md").read_text()
    assert signature in log and "attempt 2" in log


def test_repair_on_top_of_preflight_changes(tmp_path, tmux_socket) -> None:
    sc = make("oom_first_attempt", tmp_path)
    yaml_path = sc.codebase / "tests/bench/oom_first_attempt/oom_first_attempt.yaml"
    yaml_path.write_text(yaml_path.read_text().replace("execute_test: False", "execute_test: True"))
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert len(data["attempts"]) == 2 and data["repairs"][0]["signature"] == "cuda_oom"
    patched = (sc.results / "config.patched.yaml").read_text()
    assert "execute_test: False" in patched and "max_model_len: 12000" in patched  # both changes kept


def test_unrepairable_failure_is_failed_after_one_launch(tmp_path, tmux_socket) -> None:
    sc = make("model_missing", tmp_path)
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "failed" and len(data["attempts"]) == 1
    assert data["repairs"][0]["signature"] == "model_path_missing"
    assert sc.flag()["outcome"] == "failed"


def test_time_limit_stops_the_run_keeps_partial_results_and_leaves_no_process(tmp_path, tmux_socket) -> None:
    sc = make("long_run", tmp_path)
    limit = 20  # seconds: the sample's 0.5 minutes made shorter, still several evaluations long
    sc.blueprint.write_text(sc.blueprint.read_text().replace("0.5 minutes", f"{limit} seconds"))
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "timed_out"
    assert len(data["evaluations"]) >= 1  # partial results kept
    assert data["attempts"][0]["ended_at"] - data["attempts"][0]["started_at"] < limit + 15
    assert marked_processes(data["id"]) == []


def test_stall_is_detected(tmp_path, tmux_socket) -> None:
    sc = make("hang", tmp_path)
    proc = run_cli(sc, env_for(tmux_socket, AJET_RUNNER_STALL_SECONDS="3"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "failed" and "stall" in data["reason"]
    assert marked_processes(data["id"]) == []


def test_plateau_stops_early(tmp_path, tmux_socket) -> None:
    # The sample as shipped, with the plateau rule's default settings (`ajet-runner demo plateau`): it must
    # be past half of its time before the rule judges, and it ends early_stopped as its purpose says.
    sc = make("plateau", tmp_path)
    proc = run_cli(sc, env_for(tmux_socket))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert data["outcome"] == "early_stopped", data["reason"]
    assert "plateau" in [h["trigger"] for h in data["history"]]


def test_autokill_is_defused(tmp_path, tmux_socket) -> None:
    sc = make("autokill", tmp_path)
    bystander = subprocess.Popen(["python3", "-c", "import time; time.sleep(120)"])
    try:
        proc = run_cli(sc, env_for(tmux_socket))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert bystander.poll() is None  # a python process that is not ours survived
        data = sc.results_json()
        assert "--autokill" not in data["attempts"][0]["command"]
        assert "--autokill" in (sc.results / "repair_log.md").read_text()
    finally:
        bystander.kill()
        bystander.wait()


def test_ctrl_c_cancels_cleanly_with_exit_130(tmp_path, tmux_socket) -> None:
    sc = make("long_run", tmp_path)
    proc = subprocess.Popen([*CLI, "run", str(sc.blueprint)], env=env_for(tmux_socket), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: list((sc.results / "logs").glob("attempt-1.log")), 60, "the first attempt to start")
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out
    assert sc.flag()["outcome"] == "cancelled"
    assert marked_processes(sc.flag()["id"]) == []


def test_invalid_blueprint_is_rejected_with_reasons(tmp_path, tmux_socket) -> None:
    bad = tmp_path / "bad.md"
    bad.write_text("## [exp_purpose]\nnothing else\n## [exp_codebase_dir]\nrelative/path\n")
    proc = subprocess.run([*CLI, "run", str(bad)], env=env_for(tmux_socket), capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 1  # refused, as submit says it; 2 is for a blueprint that cannot be read
    assert "exp_codebase_dir" in proc.stderr and "exp_launch_command" in proc.stderr  # errors go to stderr
    assert "exp_codebase_dir" not in proc.stdout
    assert not os.path.exists(tmp_path / "results")


def test_repair_hook_plans_a_fix_the_catalogue_does_not_know(tmp_path, tmux_socket) -> None:
    sc = make("demo", tmp_path)
    short_sim(sc)  # two attempts of the demo: their pace is not what is tested
    yaml_path = sc.codebase / "tests/bench/benchmark_math/benchmark_math.yaml"
    text = yaml_path.read_text()
    assert "ajet_sim:\n" in text
    yaml_path.write_text(text.replace("ajet_sim:\n", "ajet_sim:\n  fail: {signature: python_traceback, at_step: 2, "
                                                   "when: first_attempt}\n", 1))
    seen = tmp_path / "hook-input.json"
    hook = tmp_path / "hook.py"
    hook.write_text(
        "import json, sys\n"
        f"data = json.load(sys.stdin); open({str(seen)!r}, 'w').write(json.dumps(data))\n"
        "print(json.dumps({'actions': [{'kind': 'set_env', 'key': 'AJET_HOOK_FIX', 'value': '1'}],"
        " 'explanation': 'the site agent says: retry with a flag'}))\n"
    )
    proc = run_cli(sc, env_for(tmux_socket, AJET_RUNNER_REPAIR_HOOK=f"python3 {hook}"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = sc.results_json()
    assert len(data["attempts"]) == 2 and data["repairs"][0]["source"] == "hook"
    assert "AJET_HOOK_FIX" in " ".join(data["repairs"][0]["changes"])
    asked = json.loads(seen.read_text())
    assert asked["diagnosis"]["signature"] == "python_traceback" and asked["log_tail"]
    assert "AJET_HOOK_FIX" in (sc.results / "logs" / "attempt-2.sh").read_text()
