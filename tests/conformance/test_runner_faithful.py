"""A run as the researcher meant it, on the REAL agentjet 0.0.1 launcher (issue 36; GPU parts stood in,
tests/conformance/harness.py): `ajet-runner run` with real tmux and the embedded Redis.

(a) a launcher inside a script (`bash scripts/train.sh`): it runs as written, and the report claims no
    preflight change (no patched YAML, no `val_before_train`);
(b) a network failure in a download step before the launcher: attempt 2 runs that step behind proxychains,
    after the catalogue's backoff;
(c) a busy second GPU (the 0.0.1 launcher checks every GPU, it has no --skip-check-avail-gpu): the runner
    waits while it is busy, relaunches once it is free, and when it stays busy ends naming the GPU and
    what to do;
(d) a CUDA OOM repaired by halving the batch: the run resumes, the report and repair log say the step unit
    changed, and every evaluation carries its attempt;
(e) the time limit falling inside a repair's backoff (GPU 1 stays busy): `timed_out` at the limit.

They run under `make conformance` (AJET_CONFORMANCE=1), one at a time.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from ajet_runner.statemachine.shell.command_file import command_script
from tests.conformance.test_runner_console import (
    FULL_TIER,
    VALIDATION_ROW,
    Figure,
    blueprint,
    figures,
    run_blueprint,
    runner_env,
    steps_of,
    write_yaml,
)

pytestmark = [pytest.mark.conformance, pytest.mark.slow, FULL_TIER, pytest.mark.timeout(900)]

NETWORK_DOWN = ("We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the "
                "cached files. Check your internet connection.")


def tool(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(body, encoding="utf-8")
    (bin_dir / name).chmod(0o755)


# ----------------------------------------------------------------------------- (a)
def test_a_launcher_in_a_script_runs_as_written_and_the_report_claims_no_change(
        codebase, make_env, tmux_socket, tmp_path, pytestconfig) -> None:
    conf = write_yaml(codebase, "script.yaml", val_before_train=False, total_epochs=2)  # 4 steps, no step 0
    original = conf.read_bytes()
    (codebase / "scripts").mkdir()
    (codebase / "scripts" / "train.sh").write_text(
        f"#!/bin/bash\nset -e\npython -m ajet.launcher --conf ./{conf.name} --backbone verl\n", encoding="utf-8")
    path, results = blueprint(tmp_path, codebase, conf, command="bash scripts/train.sh",
                              purpose="Conformance: the launcher is called by scripts/train.sh.")
    run = run_blueprint(path, results, runner_env(make_env(), tmux_socket))
    assert run.proc.returncode == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    doc = run.doc
    kept = [e["step"] for e in doc["evaluations"]]
    printed = steps_of(VALIDATION_ROW, run.log_lines())
    figures(pytestconfig).rows.append(Figure("launcher in scripts/train.sh (completed)", run.flag["outcome"],
                                             len(kept), len(printed), doc["train_steps"], run.seconds))
    assert run.flag["outcome"] == "completed" and kept == printed and 0 not in kept  # val_before_train stayed off
    assert doc["preflight_changes"] == [] and doc["patched_yaml_path"] == ""
    assert doc["launcher_hidden"].startswith("no launcher call is visible in the command: it runs "
                                             "`bash scripts/train.sh`, which calls the launcher")
    assert "scripts/train.sh line 3" in doc["launcher_hidden"] and "no preflight change applies" in doc[
        "launcher_hidden"]
    assert (results / "logs" / "attempt-1.command.sh").read_text() == command_script("bash scripts/train.sh")
    report = run.report
    assert "| YAML (as run) | as the script names it (the runner changed nothing: see Preflight) |" in report
    assert "config.patched.yaml" not in report and not (results / "config.patched.yaml").exists()
    preflight = report.split("## Preflight", 1)[1].split("## Repairs", 1)[0]
    assert "No preflight change applied" in preflight
    assert all("not changed" in line for line in preflight.splitlines() if "val_before_train" in line)
    assert conf.read_bytes() == original


# ----------------------------------------------------------------------------- (b)
def test_a_network_failure_in_a_download_step_is_proxied_on_that_line_after_the_backoff(
        codebase, make_env, tmux_socket, tmp_path, pytestconfig) -> None:
    conf = write_yaml(codebase, "net.yaml", total_epochs=1)  # 2 steps
    (codebase / "download.py").write_text(
        "import os\n\nif os.environ.get('AJET_CONF_PROXIED') != '1':\n"
        f"    raise OSError({NETWORK_DOWN!r})\nprint('downloaded Qwen/Qwen2.5-0.5B-Instruct')\n", encoding="utf-8")
    bin_dir = tmp_path / "node-bin"  # this node's proxychains4 (the host's real one would need a proxy)
    tool(bin_dir, "proxychains4", '#!/bin/sh\n[ "$1" = "-q" ] && shift\nexport AJET_CONF_PROXIED=1\nexec "$@"\n')
    command = f"python download.py && python -m ajet.launcher --conf {conf} --backbone verl"
    path, results = blueprint(tmp_path, codebase, conf, command=command,
                              purpose="Conformance: a download step fails on the network before the launcher.")
    env = runner_env(make_env(), tmux_socket, AJET_RUNNER_REPAIR_BACKOFF_SCALE="0.05")  # 60 s → 3 s
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    run = run_blueprint(path, results, env)
    assert run.proc.returncode == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    doc = run.doc
    figures(pytestconfig).rows.append(Figure("network failure in a download step (2 attempts)",
                                             run.flag["outcome"], len(doc["evaluations"]), None, doc["train_steps"],
                                             run.seconds))
    first, second = doc["attempts"]
    assert first["command"].startswith("python download.py && python -m ajet.launcher --conf ")
    assert second["command"] == "proxychains4 -q " + first["command"]  # the failing line, not the launcher
    [repair] = doc["repairs"]
    assert repair["signature"] == "network_unreachable" and repair["backoff_seconds"] == pytest.approx(3.0)
    assert "the traceback starts in" in repair["changes"][0] and "download.py" in repair["changes"][0]
    assert second["started_at"] - first["ended_at"] >= 3.0  # the backoff was waited before attempt 2
    assert "run `python download.py` behind `proxychains4 -q`" in (results / "repair_log.md").read_text()


# ----------------------------------------------------------------------------- (c)
def busy_gpu_run(codebase, make_env, tmux_socket, tmp_path, scale: str, free_after: float | None,
                 max_time: str = "10 minutes"):
    """`free_after`: seconds after attempt 1 ended (the launcher's GPU check failed) that GPU 1 is freed."""
    gpus = tmp_path / "gpus"
    gpus.write_text("0:81920:0,1:81920:40000")  # GPU 1: 51 % free, someone else's job
    conf = write_yaml(codebase, "busy.yaml", total_epochs=1)
    path, results = blueprint(tmp_path, codebase, conf, purpose="Conformance: a busy second GPU on 0.0.1.",
                              max_time=max_time)
    env = runner_env(make_env(extra={"AJET_CONF_GPUS_FILE": str(gpus)}), tmux_socket,
                     AJET_RUNNER_REPAIR_BACKOFF_SCALE=scale)
    done = threading.Event()

    def free_later() -> None:  # once attempt 1 has ended, so the runner is in its wait, not before the check
        if free_after is None:
            return
        rc = results / "logs" / "attempt-1.rc"
        while not rc.exists():
            if done.wait(0.2):
                return
        if not done.wait(free_after):
            gpus.write_text("0:81920:0,1:81920:0")

    freer = threading.Thread(target=free_later, daemon=True)
    freer.start()
    try:
        return run_blueprint(path, results, env)
    finally:
        done.set()
        freer.join(5)


def test_a_busy_second_gpu_is_waited_for_and_the_run_goes_on_once_it_is_free(
        codebase, make_env, tmux_socket, tmp_path, pytestconfig) -> None:
    run = busy_gpu_run(codebase, make_env, tmux_socket, tmp_path, scale="1", free_after=5.0)
    doc = run.doc
    figures(pytestconfig).rows.append(Figure("busy GPU 1, freed during the wait", run.flag["outcome"],
                                             len(doc["evaluations"]), None, doc["train_steps"], run.seconds))
    assert run.proc.returncode == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    assert len(doc["attempts"]) == 2
    first, second = doc["attempts"]
    assert 5.0 <= second["started_at"] - first["ended_at"] < 50  # waited while busy, not the whole 60 s
    [repair] = doc["repairs"]
    assert repair["signature"] == "gpu_busy"
    waited = next(c for c in repair["changes"] if c.startswith("waited"))
    assert "every GPU is at least 95 % free now" in waited, waited
    assert any("no --skip-check-avail-gpu" in s for s in repair["skipped"])  # 0.0.1: it cannot be confined


def test_a_gpu_that_stays_busy_ends_the_run_naming_it_and_what_to_do(
        codebase, make_env, tmux_socket, tmp_path, pytestconfig) -> None:
    run = busy_gpu_run(codebase, make_env, tmux_socket, tmp_path, scale="0.02", free_after=None)  # 1.2 s, 6 s
    doc = run.doc
    figures(pytestconfig).rows.append(Figure("busy GPU 1 stays busy (failed)", run.flag["outcome"],
                                             len(doc["evaluations"]), None, doc["train_steps"], run.seconds))
    assert run.flag["outcome"] == "failed" and len(doc["attempts"]) == 3
    for repair in doc["repairs"][:2]:
        waited = next(c for c in repair["changes"] if c.startswith("waited"))
        assert "still busy: GPU 1" in waited, waited
    assert "busy now: GPU 1" in doc["reason"] and "What to do: free the busy GPU(s)" in doc["reason"], doc["reason"]


def test_the_time_limit_ends_a_repair_backoff_timed_out_on_time(
        codebase, make_env, tmux_socket, tmp_path, pytestconfig) -> None:
    """(e) GPU 1 stays busy and the catalogue's first backoff is scaled to 120 s; the 90 s limit falls inside it
    (attempt 1, the launcher's GPU check, takes ~30 s on a loaded 2-core machine): the run ends `timed_out` at
    the limit, from `repairing`, with no second attempt and the report written."""
    run = busy_gpu_run(codebase, make_env, tmux_socket, tmp_path, scale="2", free_after=None, max_time="90 seconds")
    doc = run.doc
    figures(pytestconfig).rows.append(Figure("time limit 90 s inside a 120 s backoff", run.flag["outcome"],
                                             len(doc["evaluations"]), None, doc["train_steps"], run.seconds))
    assert run.flag["outcome"] == "timed_out", doc["reason"]
    assert len(doc["attempts"]) == 1 and doc["attempts"][0]["ended_at"] - doc["started_at"] < 90, \
        "attempt 1 must end (the launcher's GPU check) before the limit for the wait to be the one cut short"
    took = doc["finished_at"] - doc["started_at"]
    ended = doc["attempts"][0]["ended_at"] - doc["started_at"]
    figures(pytestconfig).other.append(f"time limit case: attempt 1 ended {ended:.1f} s after the start, the run "
                                       f"ended timed_out {took:.1f} s after it (limit 90 s)")
    assert 90 <= took < 105, f"ended {took:.1f} s after the start: the limit is 90 s, the backoff 120 s"
    [repair] = doc["repairs"]
    assert repair["signature"] == "gpu_busy"
    assert any("the experiment's time limit was reached" in c for c in repair["changes"]), repair["changes"]
    assert repair["next"].startswith("no relaunch: max time of ") and " reached" in repair["next"], repair["next"]
    assert [h["from"] for h in doc["history"] if h["trigger"] == "time_up"] == ["repairing"], doc["history"]
    assert repair["result"] == "not relaunched", repair["result"]  # the wait was cut short: no relaunch claimed
    assert "timed_out" in run.report and "| relaunched |" not in run.report


# ----------------------------------------------------------------------------- (d)
def test_an_oom_repair_that_halves_the_batch_says_so_and_every_evaluation_has_its_attempt(
        codebase, make_env, tmux_socket, tmp_path, pytestconfig) -> None:
    # 16 tasks / batch 8 = 2 steps an epoch, 3 epochs; a checkpoint every 2 steps; one OOM at step 3.
    once = codebase / ".conformance" / "oom-once"
    conf = write_yaml(codebase, "oom.yaml", conformance={"fail_at_step": 3, "fail_kind": "cuda_oom",
                                                         "fail_once": str(once)})
    path, results = blueprint(tmp_path, codebase, conf, purpose="Conformance: a CUDA OOM, repaired by a smaller batch.")
    run = run_blueprint(path, results, runner_env(make_env(), tmux_socket))
    assert run.proc.returncode == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    doc = run.doc
    figures(pytestconfig).rows.append(Figure("CUDA OOM at step 3, batch 8 -> 4, resumed", run.flag["outcome"],
                                             len(doc["evaluations"]), None, doc["train_steps"], run.seconds))
    assert run.flag["outcome"] == "completed" and len(doc["attempts"]) == 2 and once.exists()
    [repair] = doc["repairs"]
    assert repair["signature"] == "cuda_oom"
    assert any(c.startswith("set ajet.data.train_batch_size: 8 -> 4") for c in repair["changes"]), repair["changes"]
    unit = [c for c in repair["changes"] if c.startswith("step unit changed")]
    assert unit and "an epoch now has 2x as many steps" in unit[0]
    assert doc["attempts"][1]["start_step"] == 2  # resumed at the step-2 checkpoint, in the new unit
    attempts = [e.get("attempt") for e in doc["evaluations"]]
    assert attempts and set(attempts) == {1, 2}, attempts  # every evaluation names its attempt
    report = run.report
    assert "**From attempt 2 on, the step unit changed**" in report
    assert "| step | attempt | dataset |" in report
    assert "step unit changed" in (results / "repair_log.md").read_text()
