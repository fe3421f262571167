"""The simulated trainer: start-up chatter, steps, validations, checkpoints, injected failures.

It runs in the child process the launcher starts (`python -m ajet.backbone.main_verl`), so
a run has the same two-level process tree as a real one.
"""

from __future__ import annotations

import os
import pprint
import time
import traceback
from pathlib import Path
from typing import Any

from ajet.sim import console, failures, metrics, state
from ajet.sim.config import SimSettings, get, sim_settings, total_steps
from ajet.sim.interrupts import Interrupted

EXIT_FAILED = 1


class Trainer:
    def __init__(self, cfg: dict[str, Any], backbone: str) -> None:
        self.cfg = cfg
        self.backbone = backbone
        self.sim: SimSettings = sim_settings(cfg)
        self.cwd = Path.cwd()
        self.experiment = str(get(cfg, "ajet.experiment_name", "experiment"))
        self.pid = os.getpid()
        self.worker_pid = self.pid + 1 + self.pid % 97
        self.total, self.per_epoch = total_steps(cfg, self.sim)
        self.test_freq = int(get(cfg, "ajet.trainer_common.test_freq", 20))
        self.save_freq = int(get(cfg, "ajet.trainer_common.save_freq", 20))
        self.pass_n = int(get(cfg, "ajet.trainer_common.val_pass_n", 4))
        self.batch = int(get(cfg, "ajet.data.train_batch_size", 32))
        self.console_only = self.sim.val_format == "console"  # the current public AgentJet: no results files
        self.last_console_val: list[tuple[str, Any]] = []
        self.val_path = None if self.console_only else get(cfg, "ajet.trainer_common.val_print_to_markdown_file_path")
        self.train_path = None if self.console_only else get(
            cfg, "ajet.trainer_common.train_print_to_markdown_file_path")
        self.ckpt = state.checkpoint_dir(
            self.cwd, str(get(cfg, "ajet.trainer_common.checkpoint_base_dir", "./saved_checkpoints")),
            str(get(cfg, "ajet.project_name", "ajet_default_project")), self.experiment,
        )
        self.started = time.monotonic()
        self.steps_here = 0

    # -- output -----------------------------------------------------------------------------
    def say(self, message: str, actor: str = "TaskRunner") -> None:
        if actor == "raylet":
            console.emit_lines(message.splitlines(), "(raylet) ")
        elif actor:
            console.ray(actor, self.worker_pid if actor == "WorkerDict" else self.pid, message)
        else:
            console.emit_lines(message.splitlines())

    def print_failure(self, lines: list[tuple[str, str]]) -> None:
        for actor, text in lines:
            self.say(text, actor)

    def pause(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    # -- phases -----------------------------------------------------------------------------
    def startup(self) -> None:
        short, full = time.strftime("%m-%d %H:%M:%S"), time.strftime("%Y-%m-%d %H:%M:%S")
        chatter = [
            ("", f"INFO {short} [__init__.py:244] Automatically detected platform cuda."),
            ("", f"{full},523\tINFO worker.py:1888 -- Started a local Ray instance. "
             "View the dashboard at \x1b[1m\x1b[32m127.0.0.1:8265 \x1b[39m\x1b[22m"),
            ("TaskRunner", f"TaskRunner hostname: gpu-node-0, PID: {self.pid}"),
            ("TaskRunner", f"Using backbone: {self.backbone}"),
            ("WorkerDict", "Flash Attention 2.0 only supports torch.float16 and torch.bfloat16 dtypes, "
             "but the current dype in Qwen2ForCausalLM is torch.float32."),
            ("WorkerDict", "Qwen2ForCausalLM contains 7.62B parameters"),
            ("WorkerDict", "INFO [gpu_model_runner.py:1892] Model loading took 14.25 GiB and 9.87 seconds "
             "[repeated 7x across cluster] (Ray deduplicates logs by default. Set RAY_DEDUP_LOGS=0 to "
             "disable log deduplication, or see https://docs.ray.io/en/master/ray-observability/user-guides/"
             "configure-logging.html#log-deduplication for more options.)"),
            ("WorkerDict", "INFO [kv_cache_utils.py:716] GPU KV cache size: 492,304 tokens"),
            ("WorkerDict", f"INFO [kv_cache_utils.py:720] Maximum concurrency for "
             f"{get(self.cfg, 'ajet.rollout.max_model_len', 18000)} tokens per request: 27.35x"),
            ("TaskRunner", f"Size of train dataloader: {self.per_epoch}, Size of val dataloader: 1"),
            ("TaskRunner", f"Total training steps: {self.total}"),
        ]
        gap = self.sim.startup_seconds / len(chatter)
        for actor, text in chatter:
            self.say(text, actor)
            self.pause(gap)

    def init_failure(self) -> int | None:
        want = int(get(self.cfg, "ajet.trainer_common.n_gpus_per_node", 8)) * int(
            get(self.cfg, "ajet.trainer_common.nnodes", 1)
        )
        ctx = self.context(0)
        if failures.available_gpus(self.cfg) < want:
            self.print_failure(failures.gpu_count_mismatch(ctx))
            return EXIT_FAILED
        for inj in self.sim.fail:
            if failures.phase_of(inj) == "init" and self.fires(inj):
                self.print_failure(failures.TRAINER_TEXT[inj.signature](ctx))
                return EXIT_FAILED
        return None

    def step_failure(self, step: int) -> int | None:
        if self.sim.crash_at_step == step:
            return self.sim.crash_exit_code
        for inj in self.sim.fail:
            if failures.phase_of(inj) == "step" and failures.default_step(inj) == step and self.fires(inj):
                self.print_failure(failures.TRAINER_TEXT.get(inj.signature, failures.python_traceback)(
                    self.context(step)))
                return EXIT_FAILED
        return None

    def benign(self, phase: str, step: int | None = None) -> None:
        """Print the `benign` injections of this phase (and step) exactly as written, then go on."""
        for inj in self.sim.fail:
            if failures.phase_of(inj) != phase or (step is not None and failures.default_step(inj) != step):
                continue
            for line in failures.benign_lines(inj, self.cwd):
                console.emit(line)
                self.pause(inj.line_seconds)
            self.pause(inj.then_seconds)

    def fires(self, inj: Any) -> bool:
        return failures.should_fire(inj, self.cfg, self.cwd, self.experiment, set())

    def context(self, step: int) -> failures.FailureContext:
        return failures.FailureContext(self.cfg, step, self.worker_pid, self.pid, set())

    def hang(self) -> None:
        while True:
            time.sleep(3600)

    def append(self, path: Any, line: str) -> None:
        """Append one whole line; a bare file name fails here as in the real trainer."""
        if not path:
            return
        target = str(path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def validate(self, step: int) -> str:
        self.say(f"[validation] running {self.sim.val_total_tasks} tasks x {self.pass_n} (pass_n) ...")
        val_pause = self.sim.val_seconds if self.sim.val_seconds is not None else self.sim.step_seconds
        self.pause(val_pause)
        if self.console_only:
            items = metrics.console_val_metrics(self.sim, step, self.total, self.test_freq, self.pass_n)
            self.last_console_val = items
            return metrics.dict_line(items)
        line = metrics.dict_line(metrics.val_metrics(self.sim, step, self.total, self.test_freq, self.pass_n))
        self.append(self.val_path, line)
        self.say(f"step:{step} - validation: {line}")
        return line

    def announce(self, which: str, line: str) -> None:
        """`Initial/Final validation metrics: {...}`; the console-only AgentJet prints it through
        pprint of a string, so it comes quoted and, when long, wrapped over several lines."""
        text = f"{which} validation metrics: {line}"
        self.say(pprint.pformat(text) if self.console_only else text)

    def progress(self, step: int) -> None:
        elapsed = time.monotonic() - self.started
        self.say(console.progress_bar("Training Progress", step, self.total, elapsed, self.steps_here))

    def train_step(self, step: int) -> None:
        epoch = (step - 1) // self.per_epoch
        self.say(f"[rollout] step {step}: {self.batch} tasks x "
                 f"{get(self.cfg, 'ajet.rollout.num_repeat', 4)} repeats submitted to "
                 f"{get(self.cfg, 'ajet.rollout.max_env_worker', 64)} env workers")
        t0 = time.monotonic()
        self.pause(self.sim.step_seconds)
        items = metrics.train_metrics(
            self.sim, step, self.total, self.test_freq, epoch, self.batch, time.monotonic() - t0
        )
        self.append(self.train_path, metrics.dict_line(items))
        self.say(metrics.console_step_line(items))
        self.steps_here += 1
        self.progress(step)

    # -- the run ------------------------------------------------------------------------------
    def run(self) -> int:
        self.startup()
        code = self.init_failure()
        if code is not None:
            return code
        if self.sim.hang_at_step == 0:
            self.hang()
        start = min(state.latest_checkpoint(self.ckpt), self.total)
        if start:  # verl's RayPPOTrainer._load_checkpoint with resume_mode: auto prints exactly these
            folder = self.ckpt / f"global_step_{start}"
            self.say(f"Load from checkpoint folder: {folder}")
            self.say(f"Setting global step to {start}")
            self.say(f"Resuming from {folder}")
        else:
            self.say("Training from scratch")
        last_val = ""
        if get(self.cfg, "ajet.trainer_common.val_before_train", False):
            last_val = self.validate(start)
            self.announce("Initial", last_val)
        self.progress(start)
        for step in range(start + 1, self.total + 1):
            if self.sim.hang_at_step == step:
                self.hang()
            code = self.step_failure(step)
            if code is not None:
                return code
            self.benign("benign", step)
            self.train_step(step)
            if get(self.cfg, "ajet.execute_test", False) and step >= self.sim.probe_step:
                self.print_failure(failures.execute_test_probe(self.context(step)))
                return EXIT_FAILED
            if self.save_freq > 0 and (step % self.save_freq == 0 or step == self.total):
                saved = state.save_checkpoint(self.ckpt, step)
                self.say(f"local_global_step_folder: {saved}")
            if self.test_freq > 0 and (step % self.test_freq == 0 or step == self.total):
                last_val = self.validate(step)
                if self.console_only and step != self.total:
                    self.say(metrics.console_val_step_line(step, self.last_console_val))
        if not last_val:
            pick = metrics.console_val_metrics if self.console_only else metrics.val_metrics
            last_val = metrics.dict_line(pick(self.sim, self.total, self.total, self.test_freq, self.pass_n))
        self.announce("Final", last_val)
        self.benign("end")
        self.say("Training finished, shutting down workers ...")
        if self.sim.actor_died_at_exit:
            self.print_failure([
                ("", "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."),
                ("", "\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict"),
                ("", f"\tpid: {self.worker_pid}"),
                ("", "The actor is dead because its owner has died."),
            ])
        return 0


def run_safely(trainer: Trainer) -> int:
    """Exceptions become a Ray-prefixed traceback and exit 1; signals end the run quickly."""
    try:
        return trainer.run()
    except Interrupted as stop:
        if stop.signum == 2:
            console.emit_lines(["Traceback (most recent call last):",
                                '  File "ajet/backbone/main_verl.py", line 64, in main', "KeyboardInterrupt"])
        else:
            console.emit(f"(TaskRunner pid={trainer.pid}) Received signal {stop.signum}, shutting down.")
        return stop.exit_code
    except Exception:  # noqa: BLE001 - the traceback goes to the log, as the real trainer's
        for line in traceback.format_exc().splitlines():
            trainer.say(line)
        console.emit("Error executing job with overrides: []")
        return EXIT_FAILED
