"""Simulated `python -m ajet.launcher`: same flags, same order of checks, same exit codes.

Order, as in AgentJet: GPU check -> (auto)kill -> config -> companions -> model path ->
environment check -> trainer subprocess. `--autokill` here only reports what the real one
would kill. Everything else (failures, timings) is driven by the YAML's `ajet_sim:` section.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from ajet.sim import companions, console, failures, interrupts, ray_cluster, state
from ajet.sim.config import (
    SimSettings,
    compose,
    experiment_name,
    get,
    read_hierarchical_config,
    read_yaml,
    sim_settings,
)

DEFAULT_DIR = "saved_experiments"
BACKBONES = {"verl": "ajet.backbone.main_verl", "trinity": "ajet.backbone.main_trinity",
             "debug": "ajet.backbone.main_vllm"}
COMPANION_FLAGS = ("appworld", "deepfinance", "webshop", "bfcl", "crafters")
EXIT_FAILED = 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="AgentJet Launcher (simulated)")
    parser.add_argument("--backbone", default="verl", help="verl or trinity or debug")
    parser.add_argument("--conf", default="", help="Path to configuration file")
    parser.add_argument("--exp-dir", default=DEFAULT_DIR, help="Path to experiment directory")
    parser.add_argument("--with-ray", action="store_true", help="Launch ray")
    parser.add_argument("--with-ray-cluster", action="store_true",
                        help="Launch a multi-node ray cluster (MASTER_ADDR, MASTER_PORT; head = the node named so)")
    for name in COMPANION_FLAGS:
        parser.add_argument(f"--with-{name}", action="store_true", help=f"Launch {name}")
    parser.add_argument("--with-logview", action="store_true", help="Launch logview")
    parser.add_argument("--skip-check-avail-gpu", action="store_true", help="Skip GPU availability check")
    parser.add_argument("--kill", default="", help="list of keywords for killing processes")
    parser.add_argument("--autokill", action="store_true",
                        help="Kill system processes (ray + vllm + python) that may block the current experiment")
    return parser.parse_args(argv)


class LaunchContext:
    """What the checks need: the raw YAML (for injections), flags and the working dir."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.cwd = Path.cwd()
        try:
            self.peek: dict[str, Any] = read_yaml(args.conf) if args.conf else {}
        except (OSError, yaml.YAMLError):
            self.peek = {}
        self.sim: SimSettings = sim_settings(self.peek)
        self.named_at = state.launch_time(self.cwd, self.sim.minutes_apart)  # one stamp for the whole launch
        self.experiment = experiment_name(self.peek, args.conf or "experiment.yaml", self.named_at)
        self.flags: set[str] = set()
        if args.with_ray:
            self.flags.add("with_ray")
        if args.skip_check_avail_gpu or args.backbone == "debug" or args.kill or args.autokill:
            self.flags.add("skip_gpu_check")

    def injected(self, signature: str, cfg: dict[str, Any] | None = None) -> bool:
        for inj in self.sim.fail:
            if inj.signature == signature and failures.should_fire(
                inj, cfg if cfg is not None else self.peek, self.cwd, self.experiment, self.flags
            ):
                return True
        return False


def nvidia_smi_gpus() -> list[tuple[str, float, float]] | None:
    """(name, total MiB, used MiB) per GPU from a `nvidia-smi` on PATH, queried as AgentJet's
    check_avail_gpu does; None when there is none (the simulated node's GPUs are then all free)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    out = subprocess.run([exe, "--query-gpu=name,memory.total,memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=False)
    rows = []
    for line in out.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3:
            rows.append((parts[0], float(parts[1]), float(parts[2])))
    return rows


def check_nvidia_smi(rows: list[tuple[str, float, float]]) -> None:
    """AgentJet's rule on what nvidia-smi reports: every GPU >= 95% free, CUDA_VISIBLE_DEVICES ignored."""
    violations = []
    for idx, (name, total, used) in enumerate(rows):
        ratio = max(total - used, 0.0) / total if total > 0 else 0.0
        console.log("INFO", f"GPU {idx} ({name}): total={total:.0f} MiB, used={used:.0f} MiB, free_ratio={ratio:.3f}",
                    "ajet.launcher:check_avail_gpu:167")
        if ratio < 0.95:
            violations.append(f"GPU {idx} ({name}): free_ratio={ratio:.3f} < 0.950")
    if violations:
        message = f"GPU memory check failed: all GPUs must have >= 95% free. Violations: {'; '.join(violations)}"
        console.log("ERROR", message, "ajet.launcher:check_avail_gpu:175")
        raise RuntimeError(message)
    console.log("SUCCESS", f"All {len(rows)} GPUs are available.", "ajet.launcher:check_avail_gpu:180")


def check_avail_gpu(ctx: LaunchContext) -> None:
    """Every GPU the node has must be >= 95% free; CUDA_VISIBLE_DEVICES is ignored, as in AgentJet.
    Busy GPUs come from AJET_SIM_BUSY_GPUS or a `gpu_busy` injection, else from a nvidia-smi on PATH."""
    busy = [int(x) for x in os.environ.get("AJET_SIM_BUSY_GPUS", "").split(",") if x.strip().isdigit()]
    if not busy and ctx.injected("gpu_busy"):
        busy = [0, 1]
    if not busy and (rows := nvidia_smi_gpus()) is not None:
        check_nvidia_smi(rows)
        return
    node = int(os.environ.get("AJET_SIM_GPUS", ctx.sim.available_gpus))
    console.log("INFO", "Checking GPU availability: every GPU must have >= 95% free memory ...",
                "ajet.utils.launch_utils:check_avail_gpu:301")
    if not busy:
        console.log("SUCCESS", f"All {node} GPUs are available.", "ajet.utils.launch_utils:check_avail_gpu:330")
        return
    for gpu in range(node):
        free = 0.412 if gpu in busy else 0.998
        console.emit(f"GPU {gpu}: NVIDIA H100 80GB HBM3, free {free * 100:.1f}% "
                     f"({free * 81559:.0f} MiB / 81559 MiB)", sys.stderr)
    console.log("ERROR", "GPU memory check failed: all GPUs must have >= 95% free memory. Busy GPUs: "
                f"{busy}. Use `--skip-check-avail-gpu` to skip this check.",
                "ajet.utils.launch_utils:check_avail_gpu:327")
    raise RuntimeError("GPU memory check failed: all GPUs must have >= 95% free memory")


def autokill(ctx: LaunchContext, keywords: str) -> None:
    """Report, never act: the real one runs `ray stop --force` and kills every match."""
    console.log("INFO", f"Killing processes matching keywords: {keywords}")
    plan: dict[str, list[int]] = {}
    for keyword in keywords.split("|"):
        console.log("INFO", f"Killing processes matching keyword: {keyword}")
        if keyword == "ray":
            console.emit("ray stop --force")
            console.emit("Did not find any active Ray processes.")
        pids = companions.matching_pids(keyword)
        plan[keyword] = pids
        if pids:
            console.log("SUCCESS", f"Successfully killed processes with PIDs: {pids}")
        else:
            console.log("WARNING", f"No processes found matching keyword: {keyword}")
    where = companions.record_autokill(ctx.cwd, plan)
    console.log("WARNING", f"[ajet-sim] --autokill is simulated: nothing was killed (see {where}).")


def prepare_config(ctx: LaunchContext) -> tuple[dict[str, Any], Path]:
    """Compose the YAML with its defaults and keep a copy under saved_experiments/<name>/."""
    config = read_hierarchical_config(ctx.args.conf, ctx.args.backbone)
    name = experiment_name(config, ctx.args.conf, ctx.named_at)  # the YAML's own value, as AgentJet reads it
    where = "ajet.utils.config_utils:prepare_experiment_config"
    for line, text in ((284, "-" * 40), (285, f"Experiment Name: {name}"),
                       (286, f"Experiment Backup Dir: {ctx.args.exp_dir}/{name}/backup"), (288, "-" * 40)):
        console.log("INFO", text, f"{where}:{line}")
    cfg = compose(config, ctx.args.conf, ctx.cwd)
    cfg["ajet"]["experiment_name"] = name
    cfg["ajet"]["backbone"] = ctx.args.backbone
    exp_dir = ctx.cwd / ctx.args.exp_dir / name
    exp_dir.mkdir(parents=True, exist_ok=True)
    target = exp_dir / Path(ctx.args.conf).name
    target.write_text(yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True), encoding="utf-8")
    for src, dst in (("ajet.rollout.max_model_len", "actor_rollout_ref.rollout.max_model_len"),
                     ("ajet.data.train_batch_size", "data.train_batch_size"),
                     ("ajet.trainer_common.n_gpus_per_node", "trainer.n_gpus_per_node")):
        console.log("SUCCESS", f"[Note]: Aligned parameter from [{src}] to [{dst}] with value: [{get(cfg, src)}]",
                    "ajet.utils.config_utils:align_parameters:214")
    ctx.experiment = name
    return cfg, target


def start_ray_cluster(ctx: LaunchContext, cfg: dict[str, Any]) -> None:
    """The head returns and trains; a worker node joins and blocks until it is stopped."""
    addr, port = ray_cluster.master()
    if ray_cluster.is_head(addr):
        ray_cluster.start_head(ctx.cwd, addr, port)
        return
    ray_cluster.join_and_block(ctx.cwd, addr, port, failures.available_gpus(cfg), ctx.sim.ray_daemon_seconds)


def start_companions(ctx: LaunchContext, cfg: dict[str, Any]) -> None:
    if ctx.args.with_ray_cluster:
        start_ray_cluster(ctx, cfg)
    if ctx.args.with_ray:
        if ctx.injected("ray_already_running", cfg):
            console.emit("Local node IP: 10.0.0.12")
            console.emit("ConnectionError: Ray is trying to start at 10.0.0.12:6379, but is already running at "
                         "10.0.0.12:6379. Please specify a different port using the `--port` flag of `ray start` "
                         "command.")
            raise RuntimeError("Failed to launch companion `ray_service`: `Ray runtime started` not seen")
        pid, fresh = companions.start(ctx.cwd, "ray", ctx.sim.ray_daemon_seconds)
        if fresh:
            for line in ("Local node IP: 10.0.0.12", "--------------------", "Ray runtime started.",
                         "--------------------", "Next steps", "  To connect to this Ray cluster:",
                         "    import ray", "    ray.init()"):
                console.emit(line)
        console.log("SUCCESS", f"Companion `ray_service` is running (pid {pid}).",
                    "ajet.utils.smart_daemon:launch:88")
    for name in COMPANION_FLAGS:
        if getattr(ctx.args, f"with_{name}"):
            pid, _ = companions.start(ctx.cwd, name, ctx.sim.ray_daemon_seconds)
            console.log("SUCCESS", f"Companion `{name}` is running (pid {pid}).", "ajet.utils.smart_daemon:launch:88")


def check_model_file_exists(ctx: LaunchContext, cfg: dict[str, Any]) -> None:
    model_path = str(get(cfg, "ajet.model.path", ""))
    if ctx.injected("model_path_missing", cfg) and model_path.count("/") <= 2:
        model_path = "/mnt/data_cpfs/model_cache/modelscope/hub/Qwen/" + model_path.replace("/", "___")
    if model_path.count("/") > 2:
        assert os.path.exists(model_path), f"Model path {model_path} does not exist. Please check your configuration."


def verify_python_env(ctx: LaunchContext, cfg: dict[str, Any]) -> None:
    natural = get(cfg, "ajet.trainer_common.logger") == "swanlab" and not os.environ.get("SWANLAB_API_KEY")
    if natural or ctx.injected("missing_api_key", cfg):
        cause = "SWANLAB_API_KEY is not set in the environment."
        solution = ("To use the swanlab logger, please set `SWANLAB_API_KEY`. Otherwise, set "
                    "`ajet.trainer_common.logger=tensorboard`")
        console.emit_lines(console.box({"Python Environment Check": "FAILED", "Cause": cause,
                                        "Solution": solution}))
        raise ImportError(cause + " " + solution)


def run_trainer(cmd: list[str]) -> None:
    """Run the trainer; signals go to it too, and stop both quickly."""
    proc = subprocess.Popen(cmd, cwd=os.path.abspath("./"))
    try:
        rc = proc.wait()
    except interrupts.Interrupted as stop:
        if proc.poll() is None:
            proc.send_signal(stop.signum)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    if rc != 0:
        raise subprocess.CalledProcessError(rc, cmd)


def launch(args: argparse.Namespace) -> int:
    ctx = LaunchContext(args)
    if "skip_gpu_check" not in ctx.flags:
        check_avail_gpu(ctx)
    if args.autokill:
        args.kill = "ray|vllm|VLLM|python"
    if args.kill:
        autokill(ctx, args.kill)
        if not args.conf:
            return 0
    if not args.conf:
        console.log("ERROR", "Please provide a configuration file with `--conf`.")
        return EXIT_FAILED
    if args.with_ray and args.with_ray_cluster:
        console.log("ERROR", "`--with-ray` and `--with-ray-cluster` cannot be used together.")
        return EXIT_FAILED
    cfg, yaml_copy = prepare_config(ctx)
    try:
        start_companions(ctx, cfg)
    except ray_cluster.ClusterConfigError as exc:
        console.log("ERROR", str(exc), "ajet.utils.launch_utils:start_ray_service:121")
        return EXIT_FAILED
    check_model_file_exists(ctx, cfg)
    cmd = [sys.executable, "-m", BACKBONES.get(args.backbone, BACKBONES["verl"]),
           "--config-path", str(yaml_copy.parent), "--config-name", yaml_copy.name]
    try:
        console.log("INFO", f"Running command: {' '.join(cmd)}", "ajet.utils.launch_utils:execute_training_process:236")
        console.emit_lines(console.box({"Running Command": " ".join(cmd), "Experiment Base": str(yaml_copy.parent),
                                        "YAML Config": str(yaml_copy)}, header="Final Training Command & Directory"))
        verify_python_env(ctx, cfg)
        run_trainer(cmd)
    except subprocess.CalledProcessError as e:
        console.log("ERROR", f"Error running subprocess: {e}", "ajet.utils.launch_utils:execute_training_process:248")
        return EXIT_FAILED
    except Exception as e:  # noqa: BLE001 - the real launcher's catch-all, mirrored
        console.log("ERROR", f"Unexpected error: {e}", "ajet.utils.launch_utils:execute_training_process:251")
        return EXIT_FAILED
    return 0


def main(argv: list[str] | None = None) -> int:
    interrupts.install()
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # typed TextIO; a TextIOWrapper here
    sys.stderr.reconfigure(line_buffering=True)  # type: ignore[union-attr]  # typed TextIO; a TextIOWrapper here
    args = parse_args(argv)
    try:
        code = launch(args)
    except interrupts.Interrupted as stop:
        time.sleep(0.05)  # let the trainer's last lines land first
        if stop.signum == 2:
            console.emit_lines(["Traceback (most recent call last):",
                                '  File "ajet/launcher.py", line 290, in <module>', "KeyboardInterrupt"],
                               stream=sys.stderr)
        else:
            console.log("WARNING", f"Received signal {stop.signum}, launcher exiting.")
        return stop.exit_code
    sim = sim_settings(read_yaml(args.conf)) if args.conf and os.path.exists(args.conf) else None
    if code == 0 and sim is not None and sim.exit_code is not None:
        return sim.exit_code
    return code


if __name__ == "__main__":
    sys.exit(main())
