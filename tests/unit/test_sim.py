"""The simulated AgentJet, run for real: launcher + trainer processes in a materialised copy."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ajet_runner.service.demo import examples_dir, list_templates, materialize

FAST = {"step_seconds": 0.03, "val_seconds": 0.01, "startup_seconds": 0.02}
YAMLS = {
    "demo": "tests/bench/benchmark_math/benchmark_math.yaml",
    "execute_test_on": "tests/bench/execute_test_on/execute_test_on.yaml",
    "oom_first_attempt": "tests/bench/oom_first_attempt/oom_first_attempt.yaml",
    "network_first_attempt": "tests/bench/network_first_attempt/network_first_attempt.yaml",
    "hang": "tests/bench/hang/hang.yaml",
    "autokill": "tests/bench/autokill/autokill.yaml",
    "plateau": "tests/bench/plateau/plateau.yaml",
}


class Sim:
    """One materialised copy of the sim codebase with a YAML to run."""

    def __init__(self, workdir: Path, template: str, **sim: Any) -> None:
        materialize(template, workdir)
        self.codebase = workdir / "codebase"
        self.conf = YAMLS[template]
        self.edit(lambda cfg: cfg.setdefault("ajet_sim", {}).update({**FAST, **sim}))

    @property
    def yaml_path(self) -> Path:
        return self.codebase / self.conf

    def edit(self, change: Callable[[dict[str, Any]], object]) -> None:
        cfg = yaml.safe_load(self.yaml_path.read_text(encoding="utf-8"))
        change(cfg)
        self.yaml_path.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AJET_SIM_", "CUDA_VISIBLE", "SIM_PROXIED", "SWANLAB"))}
        env.update(extra)
        return env

    def argv(self, *flags: str) -> list[str]:
        return [sys.executable, "-m", "ajet.launcher", "--conf", self.conf, *flags]

    def run(
        self, *flags: str, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, *self.argv(*flags)], cwd=self.codebase, env=env or self.env(),
                              capture_output=True, text=True, timeout=60)

    def result_steps(self, rel: str, key: str) -> list[int]:
        text = (self.codebase / rel).read_text(encoding="utf-8")
        return [int(m) for m in re.findall(rf"'{re.escape(key)}': (\d+)", text)]


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            return fh.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield proc
    proc.kill()
    proc.wait()


def test_templates_materialise_with_placeholders_filled(tmp_path: Path) -> None:
    names = list_templates()
    assert {"demo", "oom_first_attempt", "network_first_attempt", "model_missing", "execute_test_on",
            "hang", "plateau", "long_run", "autokill"} <= set(names)
    for name in names:
        blueprint = materialize(name, tmp_path / name, python="/opt/py/bin/python")
        text = blueprint.read_text(encoding="utf-8")
        assert "{{" not in text, name
        assert str(tmp_path / name / "codebase") in text and str(tmp_path / name / "results") in text
        if name.startswith("swarm"):  # the client is a module of the codebase; a server part or a swarm YAML
            assert "tutorial.example_swarm.agent_roll" in text, name
            swarm_yaml = tmp_path / name / "codebase" / "tutorial/example_swarm/swarm.yaml"
            assert "## [exp_swarm_server]" in text or ("tutorial/example_swarm/swarm.yaml" in text
                                                      and "enable_swarm_mode: true" in swarm_yaml.read_text()), name
            continue
        yaml_rel = re.search(r"tests/bench/\w+/\w+\.yaml", text)
        assert yaml_rel and (tmp_path / name / "codebase" / yaml_rel.group(0)).is_file(), name
    assert "/opt/py/bin/python" in (tmp_path / "demo" / "blueprint.md").read_text(encoding="utf-8")
    with pytest.raises(FileNotFoundError, match="no blueprint template"):
        materialize("no_such_template", tmp_path / "x")


def test_materialised_copy_is_fresh_and_private(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    repo_yaml = examples_dir() / "agentjet_sim" / YAMLS["demo"]
    assert "step_seconds: 0.03" in sim.yaml_path.read_text(encoding="utf-8")
    assert "step_seconds: 0.03" not in repo_yaml.read_text(encoding="utf-8")
    (sim.codebase / "checkpoints").mkdir()
    materialize("demo", tmp_path)
    assert not (sim.codebase / "checkpoints").exists()
    assert os.access(sim.codebase / "bin" / "proxychains4", os.X_OK)


def test_clean_run_validates_on_schedule_and_finishes(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    out = sim.run()
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("Final validation metrics: {") == 1
    assert "Training Progress: 100%|██████████| 10/10" in out.stdout
    assert "(TaskRunner pid=" in out.stdout and "\x1b[" in out.stdout
    val = sim.result_steps("saved_val_result/benchmark_math_demo_val.md", "global_steps")
    assert val == [0, 2, 4, 6, 8, 10]
    assert sim.result_steps("saved_val_result/benchmark_math_demo_train.md", "training/global_step") == list(
        range(1, 11))
    first = (sim.codebase / "saved_val_result/benchmark_math_demo_val.md").read_text(encoding="utf-8").splitlines()[0]
    assert "'num_pass_n_tasks(pass@4)': " in first and "'std_reward': np.float64(" in first
    rewards = [float(x) for x in re.findall(r"'mean_reward': ([0-9.]+)", out.stdout.split("Final validation")[0])]
    assert rewards[0] < 0.4 < 0.7 < rewards[-1]


def test_a_benign_injection_prints_its_lines_as_written_and_training_goes_on(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    (sim.codebase / "benign.log").write_text("\x1b[36m(TaskRunner pid=1)\x1b[0m from a file\nsecond\n")
    sim.edit(lambda cfg: cfg["ajet_sim"].update(fail=[
        {"signature": "benign", "at_step": 3, "lines": ["PYTORCH_CUDA_ALLOC_CONF=x (to avoid CUDA out of memory)"],
         "file": "benign.log", "then_seconds": 0.05},
        {"signature": "benign", "at_end": True, "lines": ["ray.exceptions.ActorDiedError: late"]}]))
    out = sim.run()
    assert out.returncode == 0, out.stderr[-2000:]
    text = out.stdout
    echo = text.index("PYTORCH_CUDA_ALLOC_CONF=x (to avoid CUDA out of memory)\n")
    assert text.index("\x1b[36m(TaskRunner pid=1)\x1b[0m from a file\nsecond\n") > echo
    assert text.rindex("2/10", 0, echo) < echo < text.index("3/10")  # at step 3, before its training step
    assert text.index("Final validation metrics") < text.index("ray.exceptions.ActorDiedError: late")


def test_plateau_goes_flat_after_the_first_evaluations(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "plateau")
    sim.edit(lambda cfg: cfg["ajet"]["trainer_common"].update(total_training_steps=20))
    assert sim.run().returncode == 0
    text = (sim.codebase / "saved_val_result/plateau_val.md").read_text(encoding="utf-8")
    rewards = [float(x) for x in re.findall(r"'mean_reward': ([0-9.]+)", text)]
    assert len(rewards) == 11 and rewards[2] - rewards[0] > 0.3
    assert max(rewards[3:]) - min(rewards[3:]) < 0.02


def test_generic_crash_and_exit_code_override(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo", crash_at_step=3, crash_exit_code=137)
    crashed = sim.run()
    assert crashed.returncode == 1 and "non-zero exit status 137." in crashed.stderr
    sim.edit(lambda cfg: cfg["ajet_sim"].update(crash_at_step=None, exit_code=3))
    done = sim.run()
    assert done.returncode == 3 and "Final validation metrics" in done.stdout


def test_execute_test_probe_stops_training(tmp_path: Path) -> None:
    out = Sim(tmp_path, "execute_test_on").run()
    assert out.returncode == 1
    assert "[TestProbe] Reward test failed at step 2" in out.stdout
    assert "TestFailException" in out.stdout
    assert "Error running subprocess: Command '[" in out.stderr and "non-zero exit status 1." in out.stderr
    assert "Final validation metrics" not in out.stdout


def test_first_attempt_oom_then_resume_repeats_steps(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "oom_first_attempt")
    first = sim.run()
    assert first.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in first.stdout
    assert (sim.codebase / ".sim_state/oom_first_attempt/failed-cuda_oom").exists()
    ckpt = sim.codebase / "saved_checkpoints/benchmarking/oom_first_attempt"  # verl: base/project/experiment
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert "Training from scratch" in first.stdout and "Experiment Name: oom_first_attempt" in first.stderr
    second = sim.run()
    assert second.returncode == 0, second.stdout[-2000:]
    assert f"Load from checkpoint folder: {ckpt}/global_step_2" in second.stdout
    assert "Setting global step to 2" in second.stdout and f"Resuming from {ckpt}/global_step_2" in second.stdout
    assert sim.result_steps("saved_val_result/oom_first_attempt_val.md", "global_steps") == [0, 2, 2, 4, 6, 8, 10]


def test_an_unnamed_experiment_is_named_like_agentjet_and_resumes_only_under_the_same_name(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "oom_first_attempt", minutes_apart=True)
    sim.edit(lambda cfg: cfg["ajet"].update(experiment_name="read_yaml_name"))
    first = sim.run()
    assert first.returncode == 1
    [name] = re.findall(r"Experiment Name: ([\w-]+)", first.stderr)
    assert re.fullmatch(r"oom_first_attempt_\d{8}_\d{4}", name)  # <yaml stem>_<YYYYmmdd_HHMM>
    ckpt = sim.codebase / "saved_checkpoints/benchmarking" / name
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    # a relaunch in a later minute is a new experiment: another name, from step 0 (and its
    # first-attempt failure fires again, since that marker is per experiment)
    again = sim.run()
    [other] = re.findall(r"Experiment Name: ([\w-]+)", again.stderr)
    assert other != name and "Training from scratch" in again.stdout
    # the name pinned: the same experiment, resumed at its checkpoint
    sim.edit(lambda cfg: cfg["ajet"].update(experiment_name=name))
    pinned = sim.run()
    assert pinned.returncode == 0 and f"Experiment Name: {name}" in pinned.stderr
    assert f"Resuming from {ckpt}/global_step_2" in pinned.stdout


def test_oom_condition_is_lifted_by_the_real_repair(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "oom_first_attempt",
              fail={"signature": "cuda_oom", "at_step": 1, "when": "always", "max_model_len_ok": 8000})
    assert sim.run().returncode == 1
    assert sim.run().returncode == 1
    sim.edit(lambda cfg: cfg["ajet"]["rollout"].update(max_model_len=8000))
    assert sim.run().returncode == 0


def test_network_failure_lifted_by_proxychains(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "network_first_attempt")
    plain = sim.run()
    assert plain.returncode == 1
    assert "We couldn't connect to 'https://huggingface.co'" in plain.stdout
    env = sim.env(PATH=f"{sim.codebase / 'bin'}{os.pathsep}{os.environ['PATH']}")
    proxied = sim.run(env=env, prefix=("proxychains4", "-q"))
    assert proxied.returncode == 0, proxied.stdout[-2000:]


@pytest.mark.parametrize("key", ["defaults", "hydra"])
def test_dropping_hydra_keys_fails_like_agentjet(tmp_path: Path, key: str) -> None:
    sim = Sim(tmp_path, "demo")
    sim.edit(lambda cfg: cfg.pop(key))
    out = sim.run()
    assert out.returncode == 1
    assert "Traceback (most recent call last):" in out.stderr and f"KeyError: '{key}'" in out.stderr


def test_bare_val_file_name_crashes_at_first_validation(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    sim.edit(lambda cfg: cfg["ajet"]["trainer_common"].update(val_print_to_markdown_file_path="val.md"))
    out = sim.run()
    assert out.returncode == 1
    assert "FileNotFoundError" in out.stdout and "Training Progress" not in out.stdout


def test_autokill_only_reports(tmp_path: Path, sleeper: subprocess.Popen[bytes]) -> None:
    sim = Sim(tmp_path, "autokill")
    out = sim.run("--autokill")
    assert out.returncode == 0
    assert "ray stop --force" in out.stdout and "Killing processes matching keyword: python" in out.stderr
    assert sleeper.poll() is None
    plan = json.loads((sim.codebase / ".sim_state/autokill_would_kill.json").read_text(encoding="utf-8"))
    assert sleeper.pid in plan["python"]
    tail = out.stdout.split("Final validation metrics")[1]
    assert "ActorDiedError" in tail


def test_with_ray_leaves_a_companion_running(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    out = sim.run("--with-ray")
    pid = int((sim.codebase / ".sim_state/companions/ray.pid").read_text())
    try:
        assert out.returncode == 0 and "Ray runtime started." in out.stdout
        assert not gone(pid)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert "ray::head" in cmdline and "--block" in cmdline
        again = sim.run("--with-ray")
        assert again.returncode == 0 and "Ray runtime started." not in again.stdout
    finally:
        os.kill(pid, signal.SIGTERM)
    wait_for(lambda: gone(pid), 5, "companion to stop")


def test_gpu_check_and_its_skip_flag(tmp_path: Path) -> None:
    sim = Sim(tmp_path, "demo")
    busy = sim.run(env=sim.env(AJET_SIM_BUSY_GPUS="0,1"))
    assert busy.returncode == 1 and "GPU memory check failed: all GPUs must have >= 95% free" in busy.stderr
    assert sim.run("--skip-check-avail-gpu", env=sim.env(AJET_SIM_BUSY_GPUS="0,1")).returncode == 0
    few = sim.run(env=sim.env(CUDA_VISIBLE_DEVICES="0,1"))
    assert few.returncode == 1 and "Total available GPUs 2 is less than total desired GPUs 8" in few.stdout


def _start_hanging(sim: Sim) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(sim.argv(), cwd=sim.codebase, env=sim.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    lines: list[str] = []
    assert proc.stdout is not None
    stream = proc.stdout
    threading.Thread(target=lambda: lines.extend(stream), daemon=True).start()
    val = sim.codebase / "saved_val_result/hang_val.md"
    wait_for(lambda: val.exists() and "'global_steps': 2," in val.read_text(encoding="utf-8"), 20, "step 2")
    return proc, lines


@pytest.mark.parametrize(
    ("signum", "to_group", "code", "goodbyes"),
    [
        (signal.SIGINT, True, 130, ["KeyboardInterrupt", "KeyboardInterrupt"]),
        (signal.SIGTERM, False, 143, ["Received signal 15, shutting down.", "Received signal 15, launcher exiting."]),
    ],
)
def test_signal_stops_a_hanging_run_quickly(
    tmp_path: Path, signum: int, to_group: bool, code: int, goodbyes: list[str]
) -> None:
    sim = Sim(tmp_path, "hang")
    proc, lines = _start_hanging(sim)
    sent = time.monotonic()
    try:
        if to_group:
            os.killpg(proc.pid, signum)  # what Ctrl-C in a tmux pane does
        else:
            os.kill(proc.pid, signum)  # the launcher alone: it must pass the signal to its trainer
        assert proc.wait(timeout=5) == code
        assert time.monotonic() - sent < 2.0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "".join(lines)
    wait_for(lambda: all("".join(lines).count(g) >= goodbyes.count(g) for g in goodbyes), 5, "goodbye lines")
    trainer = int(re.findall(r"\(TaskRunner pid=(\d+)\)", text)[0])
    wait_for(lambda: gone(trainer), 5, "trainer to exit")
    assert all(line.endswith("\n") for line in lines)
