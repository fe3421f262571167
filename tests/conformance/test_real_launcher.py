"""The REAL AgentJet 0.0.1 launcher (`python -m ajet.launcher`) under the GPU stand-ins.

No ajet-runner code runs here: these tests pin down what the real launcher does and prints,
the facts docs/agentjet-real-formats.md states and the runner's parsers are written against.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.conformance import harness

# The first test may build the conformance venv (about a minute warm, longer on a cold pip cache).
pytestmark = [pytest.mark.conformance, pytest.mark.slow, pytest.mark.timeout(1200)]

STEP_LINE = re.compile(r"^step:(\d+) - ")
BUSY = "0:80000:100,1:80000:79200"  # GPU 1 has 1 % free


def _yaml_with(codebase: Path, name: str, **ajet_overrides: object) -> str:
    """A copy of minimal.yaml with `ajet.<dotted key>` values replaced (text edit keeps the rest)."""
    import yaml

    data = yaml.safe_load((codebase / "minimal.yaml").read_text())
    for dotted, value in ajet_overrides.items():
        node = data["ajet"]
        *parents, leaf = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
    path = codebase / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return f"./{name}"


def _steps(lines: list[str]) -> list[int]:
    return [int(m.group(1)) for line in lines if (m := STEP_LINE.match(line))]


def test_six_steps_every_step_line_and_exit_0(codebase, make_env):
    env = make_env()
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", "--backbone", "verl", env=env)
    assert res.returncode == 0, res.stdout[-4000:]
    lines = harness.console_lines(res.stdout)
    steps = _steps(lines)
    # Step 0: eval_dataset's own line + the initial-validation line. Steps 1..6 with test_freq 1:
    # eval_dataset's validation line, then the step's line (training + validation keys).
    assert steps == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    step_lines = [line for line in lines if STEP_LINE.match(line)]
    val_only, train = step_lines[2::2], step_lines[3::2]
    for n, line in enumerate(val_only, start=1):
        assert line.startswith(f"step:{n} - pass_n:4 - total_tasks:32 - "), line
        assert " - TGC@1:" in line and " - TGC@4:" in line and " - TGC@4-all-pass:" in line
        assert "target dataset name" not in line  # a string value: concat_dict_to_str drops it
    for n, line in enumerate(train, start=1):
        for key in ("critic/real_reward:", "actor/kl_loss:", "actor/pg_loss:", "TGC@1:",
                    f"training/global_step:{n} - ", "training/epoch:", "timing_s/step:", "timing_s/testing:",
                    "perf/throughput:"):
            assert key in line, (key, line)
        assert "np.float64(" not in line  # numpy<2 (verl-bundle's pin): plain reprs
    text = "\n".join(lines)
    assert text.count("Initial validation metrics: {") == 1
    assert "'Final validation metrics: {" in text or '("Final validation metrics: {' in text
    assert re.search(r"Training Progress: 100%\|.*\| 6/6 ", text)
    ckpt = codebase / "saved_checkpoints" / "conformance"
    [exp_dir] = list(ckpt.iterdir())
    assert sorted(p.name for p in exp_dir.iterdir()) == [
        "global_step_2", "global_step_4", "global_step_6", "latest_checkpointed_iteration.txt"]
    assert (exp_dir / "latest_checkpointed_iteration.txt").read_text() == "6"
    assert "Training from scratch" in text


def test_experiment_name_is_stem_and_minute(codebase, make_env):
    before = time.strftime("%Y%m%d_%H%M")
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", env=make_env())
    after = time.strftime("%Y%m%d_%H%M")
    assert res.returncode == 0, res.stdout[-3000:]
    [name] = re.findall(r" - Experiment Name: (\S+)$", res.stdout, re.M)
    assert re.fullmatch(r"minimal_\d{8}_\d{4}", name)
    assert before <= name.removeprefix("minimal_") <= after
    assert f"Experiment Backup Dir: saved_experiments/{name}/backup" in res.stdout
    assert (codebase / "saved_experiments" / name / "yaml_backup.yaml").is_file()
    assert (codebase / "saved_checkpoints" / "conformance" / name / "global_step_6").is_dir()


def test_conf_without_directory_fails_before_anything(codebase, make_env):
    res = harness.run_launcher(codebase, "--conf", "minimal.yaml", env=make_env())
    assert res.returncode == 1
    assert res.stdout.rstrip().endswith("FileNotFoundError: Configuration file not found:")
    assert "Experiment Name:" not in res.stdout


def test_gpu_check_fails_with_the_real_message_when_a_gpu_is_busy(codebase, make_env):
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", env=make_env(gpus=BUSY))
    assert res.returncode == 1
    assert "GPU 0 (NVIDIA A100-SXM4-80GB): total=80000 MiB, used=100 MiB, free_ratio=0.999" in res.stdout
    assert res.stdout.rstrip().splitlines()[-1] == (
        "RuntimeError: GPU memory check failed: all GPUs must have >= 95% free. "
        "Violations: GPU 1 (NVIDIA A100-SXM4-80GB): free_ratio=0.010 < 0.950")
    assert "Experiment Name:" not in res.stdout


@pytest.mark.parametrize(("used", "passes"), [(5000, True), (5001, False)])
def test_gpu_check_95_percent_boundary(codebase, make_env, used, passes):
    env = make_env(gpus=f"0:100000:{used}", extra={"AJET_CONF_TRAIN_TASKS": "8", "AJET_CONF_VAL_TASKS": "4"})
    conf = _yaml_with(codebase, "one_epoch.yaml", **{"trainer_common.total_epochs": 1})
    res = harness.run_launcher(codebase, "--conf", conf, env=env)
    assert (res.returncode == 0) is passes, res.stdout[-2000:]
    assert ("✓ GPU check passed: 1 GPUs, all >= 95% free memory" in res.stdout) is passes


def test_nvidia_smi_failure_is_reported(codebase, make_env):
    env = make_env(extra={"AJET_CONF_NVIDIA_SMI_FAIL": "NVIDIA-SMI has failed because it couldn't communicate "
                                                        "with the NVIDIA driver."})
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", env=env)
    assert res.returncode == 1
    assert res.stdout.rstrip().splitlines()[-1] == (
        "RuntimeError: Failed to query GPUs via nvidia-smi: NVIDIA-SMI has failed because it couldn't "
        "communicate with the NVIDIA driver.")


def test_no_gpu_listed_and_no_nvidia_smi(codebase, make_env, conf_python):
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", env=make_env(gpus=""))
    assert res.returncode == 1
    assert res.stdout.rstrip().splitlines()[-1] == "RuntimeError: No GPUs detected by nvidia-smi."
    env = make_env()
    env["PATH"] = f"{Path(conf_python).parent}:/usr/bin:/bin"  # no fake nvidia-smi (and no --kill: safe)
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", env=env)
    assert res.returncode == 1
    assert res.stdout.rstrip().splitlines()[-1] == (
        "RuntimeError: nvidia-smi not found. NVIDIA drivers/GPU may be unavailable.")


def test_missing_model_dir_is_caught_before_training(codebase, make_env):
    conf = _yaml_with(codebase, "nomodel.yaml", **{"model.path": "/no/such/models/Qwen2.5-7B"})
    res = harness.run_launcher(codebase, "--conf", conf, env=make_env())
    assert res.returncode == 1
    assert res.stdout.rstrip().splitlines()[-1] == (
        "AssertionError: Model path /no/such/models/Qwen2.5-7B does not exist. Please check your configuration.")
    assert "Experiment Name: nomodel_" in res.stdout and "Running command:" not in res.stdout


def test_skip_check_avail_gpu_does_not_exist_in_0_0_1(codebase, make_env):
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", "--skip-check-avail-gpu",
                               env=make_env(gpus=BUSY))
    assert res.returncode == 2
    assert "error: unrecognized arguments: --skip-check-avail-gpu" in res.stdout


def test_swarm_server_flag_does_not_exist_in_0_0_1(codebase, make_env):
    res = harness.run_launcher(codebase, "--swarm-server", "--conf", "./swarm.yaml", env=make_env())
    assert res.returncode == 2
    assert "error: unrecognized arguments: --swarm-server" in res.stdout


def _protection_active(env: dict[str, str]) -> None:
    """The fakes must be what the launcher's `bash -lc "pgrep ..."` reaches, or no kill test runs."""
    where = subprocess.run(["bash", "-lc", "command -v pgrep; command -v ps"], env=env,
                           capture_output=True, text=True, check=True).stdout.split()
    assert where == [str(harness.STANDIN_BIN / "pgrep"), str(harness.STANDIN_BIN / "ps")], where


def test_autokill_skips_the_gpu_check_and_kills_only_the_sandbox(codebase, make_env, conf_python):
    env = make_env(gpus=BUSY, extra={"AJET_CONF_TRAIN_TASKS": "8", "AJET_CONF_VAL_TASKS": "4"})
    _protection_active(env)
    conf = _yaml_with(codebase, "one_epoch.yaml", **{"trainer_common.total_epochs": 1})
    sleeper = [conf_python, "-c", "import time; time.sleep(300)"]
    victim = subprocess.Popen(sleeper, env=env)  # carries the token: --autokill's business
    bystander_env = {k: v for k, v in env.items() if k != "AJET_CONF_SANDBOX"}
    bystander = subprocess.Popen(sleeper, env=bystander_env)  # another experiment's python
    try:
        res = harness.run_launcher(codebase, "--conf", conf, "--autokill", env=env)
        assert res.returncode == 0, res.stdout[-3000:]
        assert "GPU check passed" not in res.stdout and "GPU memory check failed" not in res.stdout
        assert "Killing processes matching keywords: ray|vllm|VLLM|python" in res.stdout
        for keyword in ("ray", "vllm", "VLLM", "python"):
            assert f"Killing processes matching keyword: {keyword}" in res.stdout
        killed = [int(p) for lst in re.findall(r"Successfully killed processes with PIDs: \[([\d, ]+)\]", res.stdout)
                  for p in lst.split(",")]
        assert victim.pid in killed
        assert victim.wait(timeout=10) == -15  # the TERM the killer sends first (KILL follows 1 s later)
        assert bystander.poll() is None and bystander.pid not in killed
        calls = [json.loads(line)["argv"] for line in
                 (codebase / ".conformance" / "ray-calls.jsonl").read_text().splitlines()]
        assert ["stop", "--force"] in calls
        assert "Experiment Name: one_epoch_" in res.stdout
    finally:
        for proc in (victim, bystander):
            proc.kill()
            proc.wait()


def test_kill_keyword_also_skips_the_gpu_check(codebase, make_env):
    env = make_env(gpus=BUSY, extra={"AJET_CONF_TRAIN_TASKS": "8", "AJET_CONF_VAL_TASKS": "4"})
    _protection_active(env)
    conf = _yaml_with(codebase, "one_epoch.yaml", **{"trainer_common.total_epochs": 1})
    res = harness.run_launcher(codebase, "--conf", conf, "--kill", "zz_no_such_process", env=env)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "GPU check" not in res.stdout and "GPU memory check failed" not in res.stdout
    assert "Killing processes matching keyword: zz_no_such_process" in res.stdout


def test_pinned_experiment_name_resumes_from_its_checkpoint(codebase, make_env):
    first = _yaml_with(codebase, "pinned4.yaml", experiment_name="pinned_exp", **{"trainer_common.total_epochs": 2})
    res1 = harness.run_launcher(codebase, "--conf", first, env=make_env())
    assert res1.returncode == 0, res1.stdout[-3000:]
    ckpt = codebase / "saved_checkpoints" / "conformance" / "pinned_exp"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "4"
    assert "Checkpoint tracker file does not exist:" in res1.stdout and "Training from scratch" in res1.stdout

    second = _yaml_with(codebase, "pinned6.yaml", experiment_name="pinned_exp", **{"trainer_common.total_epochs": 3})
    res2 = harness.run_launcher(codebase, "--conf", second, env=make_env())
    assert res2.returncode == 0, res2.stdout[-3000:]
    lines = harness.console_lines(res2.stdout)
    text = "\n".join(lines)
    assert "Experiment Name: pinned_exp" in text
    assert text.count("Warning: backup directory already exists") == 5  # 5 s of warnings, then on
    # verl joins os.getcwd() with the relative default_local_dir as it is: `<cwd>/./saved_checkpoints/...`
    step4 = f"{os.path.realpath(codebase)}/./saved_checkpoints/conformance/pinned_exp/global_step_4"
    assert f"Found checkpoint: %s {step4}" in text  # verl's own print, its '%s' unformatted
    assert f"Load from checkpoint folder: {step4}" in text
    assert "Setting global step to 4" in text and f"Resuming from {step4}" in text
    assert _steps(lines) == [4, 4, 5, 5, 6, 6]  # validation at the resumed step, then 5 and 6
    assert re.search(r"training/global_step:5 - training/epoch:0 - ", text)  # 0.0.1 restarts epochs at 0
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text() == "6"


def test_cuda_oom_injection_exits_1_through_ray_hydra_and_the_launcher(codebase, make_env):
    env = make_env(extra={"AJET_CONF_FAIL_AT_STEP": "3", "AJET_CONF_FAIL_KIND": "cuda_oom"})
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", env=env)
    assert res.returncode == 1
    lines = harness.console_lines(res.stdout)
    text = "\n".join(lines)
    assert _steps(lines) == [0, 0, 1, 1, 2, 2]
    assert re.search(r"^ray\.exceptions\.RayTaskError\(OutOfMemoryError\): ray::TaskRunner\.run\(\) \(pid=\d+, ip=",
                     text, re.M)
    assert re.search(r"^torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate 2\.00 GiB\.", text, re.M)
    assert "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace." in text
    assert re.search(r"Error running subprocess: Command '\[.*'-m', 'ajet\.backbone\.main_verl', '--config-path', "
                     r".*\]' returned non-zero exit status 1\.$", text, re.M)
    assert "Final validation metrics" not in text


def test_benign_oom_warning_does_not_fail_the_run_and_colours_strip(codebase, make_env):
    env = make_env(colour=True, extra={"AJET_CONF_WARN_AT_STEP": "2", "AJET_CONF_WARN_KIND": "benign_oom",
                                       "RAY_COLOR_PREFIX": "1"})
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", env=env)
    assert res.returncode == 0, res.stdout[-3000:]
    assert re.search(r"^\x1b\[36m\(TaskRunner pid=\d+\)\x1b\[39m step:1 - ", res.stdout, re.M)
    assert "\x1b[32m" in res.stdout  # loguru's coloured timestamps
    lines = harness.console_lines(res.stdout)
    assert _steps(lines) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6]
    assert "WARNING: CUDA out of memory during log-prob computation (micro batch 8), retrying" in "\n".join(lines)
    assert any(line.startswith("Training Progress: 100%") for line in lines)


def test_plateau_config_goes_flat(codebase, make_env):
    res = harness.run_launcher(codebase, "--conf", "./plateau.yaml", env=make_env())
    assert res.returncode == 0, res.stdout[-3000:]
    tgc: dict[int, float] = {}
    for line in harness.console_lines(res.stdout):
        if (m := STEP_LINE.match(line)) and " - pass_n:4 - " in line[:40]:
            tgc[int(m.group(1))] = float(re.search(r" - TGC@1:([0-9.]+)", line).group(1))
    assert sorted(tgc) == list(range(13))
    assert [tgc[n] for n in range(5)] == sorted({tgc[n] for n in range(5)})  # strictly rising to step 4
    assert {tgc[n] for n in range(4, 13)} == {70 / 128}  # then flat: 0.55 of 128 rollouts, rounded


@pytest.mark.parametrize(("kind", "cause", "last"), [
    ("vllm_kv_cache", "ValueError", "ValueError: The model's max seq len (32768) is larger than the maximum number "
                                    "of tokens that can be stored in KV cache (21024)."),
    ("nccl_timeout", "RuntimeError", "RuntimeError: [Rank 0] Watchdog caught collective operation timeout: "
                                     "WorkNCCL(SeqNum=2741, OpType=ALLREDUCE"),
    ("hf_network", "OSError", "OSError: We couldn't connect to 'https://huggingface.co' to load the files"),
])
def test_other_failure_kinds_reach_the_console(codebase, make_env, kind, cause, last):
    env = make_env(extra={"AJET_CONF_FAIL_AT_STEP": "1", "AJET_CONF_FAIL_KIND": kind,
                          "AJET_CONF_TRAIN_TASKS": "8", "AJET_CONF_VAL_TASKS": "4"})
    conf = _yaml_with(codebase, "one_epoch.yaml", **{"trainer_common.total_epochs": 1})
    res = harness.run_launcher(codebase, "--conf", conf, env=env)
    assert res.returncode == 1
    text = "\n".join(harness.console_lines(res.stdout))
    assert f"ray.exceptions.RayTaskError({cause}): ray::TaskRunner.run()" in text
    assert last in text
    assert "returned non-zero exit status 1." in text


def test_killed_trainer_is_reported_with_its_signal(codebase, make_env):
    env = make_env(extra={"AJET_CONF_FAIL_AT_STEP": "1", "AJET_CONF_FAIL_KIND": "sigkill"})
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", env=env)
    assert res.returncode == 1
    assert re.search(r"Error running subprocess: Command '\[.*\]' died with <Signals\.SIGKILL: 9>\.$",
                     res.stdout, re.M)


def test_unexpected_error_path_swanlab_without_key(codebase, make_env):
    conf = _yaml_with(codebase, "swan.yaml", **{"trainer_common.logger": "swanlab"})
    res = harness.run_launcher(codebase, "--conf", conf, env=make_env())
    assert res.returncode == 1
    assert res.stdout.rstrip().splitlines()[-1].endswith(
        "Unexpected error: SWANLAB_API_KEY is not set in the environment. To use the swanlab logger, please set "
        "`SWANLAB_API_KEY`. Otherwise, set `ajet.trainer_common.logger=tensorboard`")
    assert "Python Environment Check" in res.stdout and "FAILED" in res.stdout


def test_tensorboard_logger_breaks_on_the_first_validation_dict(codebase, make_env):
    """0.0.1 logs `'target dataset name': 'main_val_dataset'` to every backend; TensorBoard's
    add_scalar cannot take a string (seen with the real torch 2.13.0+cpu SummaryWriter)."""
    conf = _yaml_with(codebase, "tb.yaml", **{"trainer_common.logger": "tensorboard"})
    res = harness.run_launcher(codebase, "--conf", conf, env=make_env())
    assert res.returncode == 1
    text = "\n".join(harness.console_lines(res.stdout))
    assert "Saving tensorboard log to tensorboard_log/conformance/tb_" in text
    assert "ray.exceptions.RayTaskError(ValueError)" in text
    assert "ValueError: could not convert string to float: 'main_val_dataset'" in text
    assert _steps(harness.console_lines(res.stdout)) == []


def test_with_ray_starts_the_fake_head_which_outlives_the_launcher(codebase, make_env):
    env = make_env(extra={"AJET_CONF_TRAIN_TASKS": "8", "AJET_CONF_VAL_TASKS": "4"})
    conf = _yaml_with(codebase, "one_epoch.yaml", **{"trainer_common.total_epochs": 1})
    res = harness.run_launcher(codebase, "--conf", conf, "--with-ray", env=env)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "Found success string 'Ray runtime started' in output" in res.stdout
    head = json.loads((codebase / ".conformance" / "ray-head.json").read_text())
    assert harness._alive(head["pid"])  # a companion daemon keeps running after training ends
    [pgid_file] = (codebase / "saved_experiments" / "companion_logs" / "companion").glob("ray_service.*.pgid")
    assert int(pgid_file.read_text()) > 0


def test_with_ray_and_a_stale_head_fails_with_rays_message(codebase, make_env):
    env = make_env(extra={"AJET_CONF_RAY_STALE": "1"})
    res = harness.run_launcher(codebase, "--conf", "./minimal.yaml", "--with-ray", env=env, timeout=120)
    assert res.returncode == 1
    assert re.search(r"ConnectionError: Ray is trying to start at 127\.0\.0\.1:6379, but is already running at "
                     r"127\.0\.0\.1:6379\.", res.stdout)
    assert re.search(r"RuntimeError: Process with PGID \d+ is not running, cannot confirm launch", res.stdout)
    assert not (codebase / "saved_checkpoints").exists()
