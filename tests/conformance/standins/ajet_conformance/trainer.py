"""GPU-free stand-in for AgentJet 0.0.1's verl trainer (`ajet.backbone.trainer_verl`).

`StandinTrainer` subclasses the REAL `AjetRayPPOTrainer` (imported from the installed wheel)
and replaces only what needs GPUs: the worker groups, the vLLM rollout and the PPO update.
The code that prints what the runner parses is the real one, called on this object:

* `AjetRayPPOTrainer.eval_dataset` — the validation metrics (`TGC@1`, `TGC@k`, ...), their
  `print_dict` box and their console line;
* `verl.utils.tracking.Tracking` with verl's console backend (`LocalLogger` /
  `concat_dict_to_str`): every `step:N - key:value - ...` line;
* `RayPPOTrainer._load_checkpoint` / `_save_checkpoint` — checkpoint layout, resume and
  their prints (`find_latest_ckpt_path` included);
* `warm_up_process`, `marked_timer`, the real `RandomDummyTaskReader` for validation tasks.

`fit()` and `_validate()` are ours: they follow the control flow of the 0.0.1 `fit()` line
for line where it decides *what is printed when* (initial validation, `Training Progress` bar,
validation at `test_freq` and on the last step, checkpoint at `save_freq` and on the last
step, `Final validation metrics`, the post-resume epoch loop), with synthetic numbers
where the GPU would compute them.
"""

from __future__ import annotations

import hashlib
import os
import time
from pprint import pprint

import numpy as np
from ajet.backbone.trainer_verl import AjetRayPPOTrainer
from ajet.backbone.warm_up import warm_up_process
from ajet.schema.trajectory import Reward
from loguru import logger
from omegaconf import OmegaConf
from tqdm import tqdm
from verl.utils.profiler.performance import marked_timer

from ajet_conformance import failures
from ajet_conformance import knobs as knobs_mod


def _uniform(*parts: object) -> float:
    """A deterministic number in [0, 1) for (task, attempt, step): reruns print the same values."""
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


class _Tracker:
    """What `eval_dataset` reads from a rollout's context tracker."""

    def __init__(self, task_id: str, reward: float) -> None:
        self.task_id = task_id
        self.reward_structure = Reward(raw_reward=reward, success_rate=1.0 if reward >= 1 else 0.0)
        self.tag = ""
        self.round_cnt = 1

    def generate_log(self) -> None:
        return None


class _ParallelEnv:
    """Stands in for AgentJet's vLLM-backed parallel rollout: rewards follow the curve knob."""

    def __init__(self, trainer: StandinTrainer) -> None:
        self.trainer = trainer

    def rollout(self, tasks, mode, epoch):
        step = self.trainer.global_steps
        p = knobs_mod.success_probability(self.trainer.knobs, step, self.trainer.total_training_steps)
        exact = self.trainer.knobs["sampling"] == "exact"
        seen: dict[str, int] = {}
        out = []
        for index, task in enumerate(tasks):
            attempt = seen.get(task.task_id, 0)
            seen[task.task_id] = attempt + 1
            # random: each rollout succeeds with probability p; exact: the first round(p * n) succeed,
            # so TGC@1 is p to the rollout (a plateau is exactly flat).
            draw = (index + 0.5) / len(tasks) if exact else _uniform(mode, task.task_id, attempt, step)
            out.append(_Tracker(task.task_id, 1.0 if draw < p else 0.0))
        return out


class _WorkerGroup:
    """Stands in for the FSDP actor worker group: checkpoints are small files, not weights."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def save_checkpoint(self, local_path, hdfs_path=None, global_step=0, max_ckpt_to_keep=None):
        os.makedirs(local_path, exist_ok=True)
        with open(os.path.join(local_path, f"model_world_size_{self.world_size}_rank_0.pt"), "w") as fh:
            fh.write(f"ajet-runner conformance stand-in checkpoint, global_step={global_step}\n")

    def load_checkpoint(self, local_path, del_local_after_load=False):
        marker = os.path.join(local_path, f"model_world_size_{self.world_size}_rank_0.pt")
        if not os.path.exists(marker):
            raise FileNotFoundError(f"checkpoint shard not found: {marker}")


class _DataLoader:
    def __init__(self, steps_per_epoch: int) -> None:
        self.steps_per_epoch = steps_per_epoch
        self.consumed = 0

    def __len__(self) -> int:
        return self.steps_per_epoch

    def state_dict(self) -> dict:
        return {"consumed": self.consumed}

    def load_state_dict(self, state: dict) -> None:
        self.consumed = int(state.get("consumed", 0))


class StandinTrainer(AjetRayPPOTrainer):
    def __init__(self, config) -> None:  # the real __init__ builds Ray worker groups: not called
        self.config = config
        self.knobs = knobs_mod.read(config)
        self.use_critic = False
        self.use_reference_policy = bool(config.actor_rollout_ref.actor.get("use_kl_loss", False))
        self.use_rm = False
        self.val_reward_fn = object()  # the real main passes verl's reward manager; only `is not None` matters
        batch = int(config.data.train_batch_size)
        steps_per_epoch = max(1, int(self.knobs["train_tasks"]) // max(1, batch))
        self.train_dataloader = _DataLoader(steps_per_epoch)
        self.actor_rollout_wg = _WorkerGroup(int(config.trainer.n_gpus_per_node) * int(config.trainer.nnodes))
        self.parallel_env = _ParallelEnv(self)
        self.global_steps = 0
        # What verl's RayPPOTrainer.__init__ / _create_dataloader print, in the same words.
        print("[validate_config] All configuration checks passed successfully!")
        print(f"Size of train dataloader: {steps_per_epoch}, Size of val dataloader: 1")
        total = steps_per_epoch * int(config.trainer.total_epochs)
        if config.trainer.get("total_training_steps") is not None:
            total = int(config.trainer.total_training_steps)
        self.total_training_steps = total
        print(f"Total training steps: {self.total_training_steps}")

    def init_workers(self) -> None:
        logger.info("conformance stand-in: no GPU workers to start (actor/rollout/ref are stand-ins)")

    # ----------------------------------------------------------------------------------------
    def get_eval_dataset(self):
        tasks = super().get_eval_dataset()  # the real reader (RandomDummyTaskReader for `random_dummy`)
        self.main_val_dataset = tasks[: int(self.knobs["val_tasks"])]
        return self.main_val_dataset

    def _validate(self):
        logger.info(f"test_gen_batch meta info: {{'validate': True, 'global_steps': {self.global_steps}}}")
        main_val_dataset = self.get_eval_dataset()
        logger.info("=" * 10 + "start validate rollout" + "=" * 10)
        _, _, val_metrics = self.eval_dataset(
            target_dataset=main_val_dataset,
            target_dataset_name="main_val_dataset",
            mode="validate",
            epoch="test.1",
        )
        logger.info("=" * 10 + "end validate rollout" + "=" * 10)
        logger.info("validation generation end")
        return val_metrics

    # ----------------------------------------------------------------------------------------
    def _train_step_metrics(self, epoch: int, timing_raw: dict) -> dict:
        step, total = self.global_steps, self.total_training_steps
        p = knobs_mod.success_probability(self.knobs, step, total)
        batch = int(self.config.data.train_batch_size)
        rewards = np.array([1.0 if _uniform("train", i, step) < p else 0.0 for i in range(batch * 4)])
        metrics = {
            "critic/round_cnt": np.mean(np.ones(len(rewards))),
            "critic/madness_rate": np.mean(np.zeros(len(rewards))),
            "critic/success_rate": np.mean(rewards),
            "critic/real_success_rate": np.mean(rewards),
            "critic/real_reward": np.mean(rewards),
        }
        actor = {
            "actor/entropy": np.float64(0.9 - 0.4 * step / max(total, 1)),
            "actor/pg_loss": np.float64(-0.01 * (1 - p)),
            "actor/pg_clipfrac": np.float64(0.002),
            "actor/ppo_kl": np.float64(0.0005 * step),
            "actor/pg_clipfrac_lower": np.float64(0.0),
            "actor/grad_norm": np.float64(0.3 + 0.05 * _uniform("grad", step)),
            "actor/lr": 1e-06,
        }
        if self.use_reference_policy:
            actor = {"actor/kl_loss": np.float64(0.001 * step), "actor/kl_coef": 0.002, **actor}
        metrics.update(actor)
        return metrics

    def _data_metrics(self, epoch: int, timing_raw: dict) -> dict:
        step = self.global_steps
        p = knobs_mod.success_probability(self.knobs, step, self.total_training_steps)
        resp = 400.0 + 50.0 * _uniform("len", step)
        tokens = int((resp + 300.0) * int(self.config.data.train_batch_size) * 4)
        metrics = {
            "training/global_step": step,
            "training/epoch": epoch,
            "critic/score/mean": np.float64(p),
            "critic/score/max": np.float64(1.0),
            "critic/score/min": np.float64(0.0),
            "critic/rewards/mean": np.float64(p),
            "critic/rewards/max": np.float64(1.0),
            "critic/rewards/min": np.float64(0.0),
            "critic/advantages/mean": np.float64(0.0),
            "critic/advantages/max": np.float64(1.5),
            "critic/advantages/min": np.float64(-1.5),
            "critic/returns/mean": np.float64(0.0),
            "critic/returns/max": np.float64(1.5),
            "critic/returns/min": np.float64(-1.5),
            "response_length/mean": np.float64(resp),
            "response_length/max": np.float64(1024.0),
            "response_length/min": np.float64(12.0),
            "response_length/clip_ratio": np.float64(0.01),
            "prompt_length/mean": np.float64(300.0),
            "prompt_length/max": np.float64(512.0),
            "prompt_length/min": np.float64(120.0),
            "prompt_length/clip_ratio": np.float64(0.0),
        }
        metrics.update({f"timing_s/{name}": value for name, value in timing_raw.items()})
        metrics.update({f"timing_per_token_ms/{name}": timing_raw[name] * 1000 / tokens
                        for name in ("gen", "update_actor") if name in timing_raw})
        step_time = timing_raw.get("step", 0.0) or 1e-9
        metrics.update({
            "perf/total_num_tokens": tokens,
            "perf/time_per_step": step_time,
            "perf/throughput": tokens / (step_time * max(1, self.actor_rollout_wg.world_size)),
        })
        return metrics

    def fit(self):  # mirrors the real fit()
        from verl.utils.tracking import Tracking

        warm_up_process(self.config)
        self.verl_logger = Tracking(
            project_name=self.config.ajet.project_name,
            experiment_name=self.config.ajet.experiment_name,
            default_backend=self.config.trainer.logger,
            config=OmegaConf.to_container(self.config, resolve=True),
        )
        self.global_steps = 0
        self._load_checkpoint()  # the REAL verl RayPPOTrainer._load_checkpoint

        if self.val_reward_fn is not None and self.config.trainer.get("val_before_train", True):
            val_metrics = self._validate()
            assert val_metrics, f"{val_metrics=}"
            pprint(f"Initial validation metrics: {val_metrics}")
            self.verl_logger.log(data=val_metrics, step=self.global_steps)
            if self.config.trainer.get("val_only", False):
                return

        progress_bar = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress")
        self.global_steps += 1
        last_val_metrics = None
        step_seconds = float(self.knobs["step_seconds"])

        for epoch in range(self.config.trainer.total_epochs):  # 0.0.1 restarts at epoch 0 after a resume
            for _ in range(len(self.train_dataloader)):
                metrics: dict = {}
                timing_raw: dict = {}
                is_last_step = self.global_steps >= self.total_training_steps
                with marked_timer("step", timing_raw):
                    with marked_timer("gen", timing_raw):
                        logger.info("=== + rollout step begin ===")
                        failures.maybe_warn(self.knobs, self.global_steps)
                        if step_seconds > 0:
                            time.sleep(step_seconds)
                        logger.info("=== - rollout step end ===")
                    with marked_timer("update_actor", timing_raw):
                        failures.maybe_fail(self.knobs, self.global_steps)
                        metrics.update(self._train_step_metrics(epoch, timing_raw))
                    self.train_dataloader.consumed += 1
                    if self.config.trainer.test_freq > 0 and (
                        is_last_step or self.global_steps % self.config.trainer.test_freq == 0
                    ):
                        with marked_timer("testing", timing_raw):
                            val_metrics = self._validate()
                            if is_last_step:
                                last_val_metrics = val_metrics
                        metrics.update(val_metrics)
                    if self.config.trainer.save_freq > 0 and (
                        is_last_step or self.global_steps % self.config.trainer.save_freq == 0
                    ):
                        with marked_timer("save_checkpoint", timing_raw):
                            self._save_checkpoint()  # the REAL verl RayPPOTrainer._save_checkpoint
                metrics.update(self._data_metrics(epoch, timing_raw))
                self.verl_logger.log(data=metrics, step=self.global_steps)
                progress_bar.update(1)
                self.global_steps += 1
                if is_last_step:
                    pprint(f"Final validation metrics: {last_val_metrics}")
                    progress_bar.close()
                    return
