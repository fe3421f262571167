"""The SLURM executor's pure pieces: scontrol's one-line form, the job's clock, sbatch's arguments, the
batch script. The executor against a real SLURM: tests/integration/test_slurm_executor.py."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ajet_runner.workers.executors.request import AttemptRequest
from ajet_runner.workers.executors.slurm.batch import batch_script
from ajet_runner.workers.executors.slurm.slurm_cli import Slurm, SlurmError, job_info, parse_fields
from ajet_runner.workers.executors.slurm.slurm_executor import SlurmExecutor, job_comment, job_name, time_limit

LINE = ("JobId=12 JobName=ajet_ab12 UserId=root(0) JobState=PENDING Reason=BeginTime Dependency=(null) "
        "Requeue=1 Restarts=1 BatchFlag=1 ExitCode=0:15 SubmitTime=2026-12-03T14:51:51 "
        "StartTime=2026-12-03T14:53:51 NodeList=(null) Comment=ajet-runner:ab12:attempt-1 extra words "
        "StdErr=/r/logs/attempt-1.slurm.out")


def test_scontrol_one_line_form_is_read_with_values_that_hold_spaces() -> None:
    fields = parse_fields(LINE)
    assert fields["Comment"] == "ajet-runner:ab12:attempt-1 extra words"
    info = job_info(fields)
    assert (info.job_id, info.state, info.reason, info.restarts, info.node) == ("12", "PENDING", "BeginTime", 1, "")
    assert info.pending and not info.ended and info.start_time is None  # a pending job's StartTime is a guess


def test_the_queue_wait_is_submit_to_start_or_so_far_while_pending() -> None:
    running = job_info(parse_fields(LINE.replace("JobState=PENDING", "JobState=RUNNING")))
    assert running.queued_seconds(time.time()) == 120.0
    pending = job_info(parse_fields(LINE))
    assert pending.submit_time is not None
    assert pending.queued_seconds(pending.submit_time + 30) == 30.0


def test_time_limit_is_max_time_plus_grace_and_a_margin_in_minutes() -> None:
    assert time_limit(None, 60) is None and time_limit(0, 60) is None
    assert time_limit(300, 60) == "8"  # 300 + 60 + 120 s -> 8 min
    assert time_limit(30, 10) == "3"


def test_sbatch_arguments_name_the_experiment_and_attempt_and_carry_the_sites_options(tmp_path: Path) -> None:
    ex = SlurmExecutor(partition="gpu", extra_args="--account=lab --qos 'high prio'")
    req = AttemptRequest(exp_id="ab12", attempt=3, gpus=2, max_seconds=300, grace_seconds=60)
    args = ex.sbatch_args(req, out=tmp_path / "attempt-3.slurm.out", workdir=tmp_path)
    assert f"--job-name={job_name('ab12')}" in args and args.count(f"--comment={job_comment('ab12', 3)}") == 1
    expected = {"--gres=gpu:2", "--time=8", "--partition=gpu", "--requeue", "--open-mode=append", "--export=NONE"}
    assert expected <= set(args)
    assert args[-3:] == ["--account=lab", "--qos", "high prio"]
    assert not any(a.startswith("--signal") for a in args)  # USR1 clashes with NCCL; the runner stops it first
    with pytest.raises(ValueError, match="slurm_args"):
        SlurmExecutor(extra_args="--comment='unclosed")


def test_a_refusal_names_a_next_step(tmp_path: Path) -> None:
    fake = tmp_path / "sbatch"
    said = "sbatch: error: Batch job submission failed: Invalid partition name specified"
    fake.write_text(f"#!/bin/sh\necho '{said}' >&2\nexit 1\n")
    fake.chmod(0o755)
    slurm = Slurm({"PATH": str(tmp_path)})
    with pytest.raises(SlurmError, match=r"«sbatch: error: .*Invalid partition name specified»; next: `sinfo -s`"):
        slurm.sbatch(["--gres=gpu:2"], "script.sh")


def test_missing_slurm_commands_are_named(tmp_path: Path) -> None:
    with pytest.raises(SlurmError, match="`sbatch` is not installed"):
        Slurm({"PATH": str(tmp_path)}).sbatch([], "script.sh")


def test_the_batch_script_is_valid_bash_and_refuses_a_requeued_rerun(tmp_path: Path) -> None:
    log = tmp_path / "attempt-1.log"
    wrapper = tmp_path / "attempt-1.sh"
    wrapper.write_text("echo wrapper-ran >> " + str(log) + "\n")
    script = tmp_path / "attempt-1.sbatch.sh"
    script.write_text(batch_script(exp_id="ab12", attempt=1, wrapper=wrapper, log=log,
                                   marker="AJET_RUNNER_EXPERIMENT=ab12", logs_id=_dev_ino(tmp_path)))
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    rerun = subprocess.run(["bash", str(script)], env={"SLURM_RESTART_COUNT": "1", "SLURM_JOB_ID": "7",
                                                        "PATH": "/usr/bin:/bin"}, check=False)
    assert rerun.returncode == 0
    assert log.read_text().startswith("[ajet-runner] SLURM job 7 was preempted or requeued")
    first = subprocess.run(["bash", str(script)], env={"PATH": "/usr/bin:/bin"}, check=False)
    assert first.returncode == 0 and log.read_text().endswith("wrapper-ran\n")


def _dev_ino(path: Path) -> str:
    st = path.stat()
    return f"{st.st_dev}:{st.st_ino}"


def test_a_shared_filesystem_with_another_device_number_on_the_node_still_runs_the_wrapper(tmp_path: Path) -> None:
    """NFS shows a directory with the same inode on every node, not always the same device number: the
    wrapper (which checks both) runs from a copy that expects the node's device number; the inode is kept."""
    log = tmp_path / "attempt-1.log"
    wrapper = tmp_path / "attempt-1.sh"
    dev, ino = _dev_ino(tmp_path).split(":")
    submitted = f"{int(dev) + 7}:{ino}"  # as the login node saw it
    wrapper.write_text(f"logs_id={submitted}\n"
                       f'[ "$(stat -c %d:%i {tmp_path})" = "$logs_id" ] && echo checked-ok >> {log}\n')
    script = tmp_path / "attempt-1.sbatch.sh"
    script.write_text(batch_script(exp_id="ab12", attempt=1, wrapper=wrapper, log=log,
                                   marker="AJET_RUNNER_EXPERIMENT=ab12", logs_id=submitted))
    assert subprocess.run(["bash", str(script)], env={"PATH": "/usr/bin:/bin"}, check=False).returncode == 0
    assert log.read_text() == "checked-ok\n"
    other = f"{dev}:{int(ino) + 1}"  # another directory altogether: never rewritten
    script.write_text(batch_script(exp_id="ab12", attempt=1, wrapper=wrapper, log=log,
                                   marker="AJET_RUNNER_EXPERIMENT=ab12", logs_id=other))
    wrapper.write_text(f"logs_id={other}\n"
                       f'[ "$(stat -c %d:%i {tmp_path})" = "$logs_id" ] || echo refused >> {log}\n')
    subprocess.run(["bash", str(script)], env={"PATH": "/usr/bin:/bin"}, check=False)
    assert log.read_text().endswith("refused\n")
