"""Reward curve and result-file lines in the classic trainer's Python-dict-repr format.

Values are deterministic per (seed, step), so a resumed run that repeats a step writes
the same numbers again, as a real run restored from the same checkpoint roughly would.
"""

from __future__ import annotations

import math
import numbers
import pprint
import random
from typing import Any

from ajet.sim.config import SimSettings


class NpFloat(float):
    """A float whose repr looks like numpy's (`np.float64(0.47)`), as real lines carry."""

    def __repr__(self) -> str:
        value = float(self)
        if math.isnan(value):
            return "np.float64(nan)"
        return f"np.float64({value!r})"


def _noise(sim: SimSettings, step: int, kind: str, scale: float) -> float:
    rng = random.Random(f"{sim.seed}:{kind}:{step}")
    return rng.uniform(-scale, scale)


def reward(sim: SimSettings, step: int, total: int, test_freq: int, kind: str = "val") -> float:
    """Rising from reward_start towards reward_end; flat after the first evaluation(s) on a plateau."""
    rise = sim.rise_steps or max(min(total, 50), 1)
    eff = step
    noise = sim.noise
    if sim.plateau:
        after = sim.plateau_after if sim.plateau_after is not None else max(min(test_freq, total), 1)
        eff = min(step, after)
        if step > after:
            noise = sim.noise * 0.2
    base = sim.reward_start + (sim.reward_end - sim.reward_start) * (1 - math.exp(-3.0 * eff / rise))
    return min(max(base + _noise(sim, step, kind, noise), 0.0), 1.0)


def dict_line(items: list[tuple[str, Any]]) -> str:
    return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in items) + "}"


def val_metrics(sim: SimSettings, step: int, total: int, test_freq: int, pass_n: int) -> list[tuple[str, Any]]:
    """One validation's metrics, keys in the order the classic trainer writes them."""
    p1 = reward(sim, step, total, test_freq)
    tasks = sim.val_total_tasks
    pass_n = max(pass_n, 1)

    def pass_at(k: int) -> float:
        return round(tasks * (1 - (1 - p1) ** (0.55 * k + 0.45))) / tasks

    n_pass = round(tasks * pass_at(pass_n))
    n_all = min(round(tasks * p1 ** (0.5 * pass_n + 0.5)), n_pass)
    items: list[tuple[str, Any]] = []
    if sim.val_format == "verl_core":
        items += [
            (f"val-core/gsm8k/reward/mean@{pass_n}", NpFloat(p1)),
            (f"val-aux/gsm8k/reward/std@{pass_n}", NpFloat(math.sqrt(p1 * (1 - p1)))),
        ]
    items += [
        ("global_steps", step),
        ("pass_n", pass_n),
        ("total_tasks", tasks),
        ("num_all_success_tasks", n_all),
        (f"num_pass_n_tasks(pass@{pass_n})", n_pass),
        ("task_pass_rate@1", p1),
        (f"task_pass_rate@{pass_n}", n_pass / tasks),
        (f"task_pass_rate@{pass_n}-all-pass", n_all / tasks),
        ("mean_reward", p1),
        ("std_reward", NpFloat(math.sqrt(p1 * (1 - p1)))),
    ]
    k = 2
    while k < pass_n:
        items.append((f"task_pass_rate@{k}", pass_at(k)))
        k *= 2
    items.append(("target_dataset_name", "main_val_dataset"))
    return items


def train_metrics(
    sim: SimSettings, step: int, total: int, test_freq: int, epoch: int, cfg_batch: int, seconds: float
) -> list[tuple[str, Any]]:
    r = reward(sim, step, total, test_freq, kind="train")
    rng = random.Random(f"{sim.seed}:train-extra:{step}")
    resp = 420.0 + 180.0 * (1 - r) + rng.uniform(-25, 25)
    return [
        ("training/global_step", step),
        ("training/epoch", epoch),
        ("critic/score/mean", NpFloat(r)),
        ("critic/rewards/mean", NpFloat(r)),
        ("critic/real_reward", NpFloat(r)),
        ("critic/advantages/mean", NpFloat(rng.uniform(-0.01, 0.01))),
        ("actor/entropy", NpFloat(0.62 - 0.25 * r + rng.uniform(-0.02, 0.02))),
        ("actor/pg_loss", NpFloat(rng.uniform(-0.05, 0.05))),
        ("actor/kl_loss", NpFloat(0.0005 * step + rng.uniform(0, 0.0005))),
        ("actor/grad_norm", NpFloat(rng.uniform(0.1, 0.6))),
        ("response_length/mean", NpFloat(resp)),
        ("prompt_length/mean", NpFloat(212.0 + rng.uniform(-5, 5))),
        ("data/train_batch_size", cfg_batch),
        ("timing_s/step", NpFloat(seconds)),
    ]


def verl_console_line(items: list[tuple[str, Any]], step: int) -> str:
    """verl's console logger (`concat_dict_to_str`): `step:N`, then `key:pformat(value)` for every
    value that is a number (strings are left out), joined by ` - `."""
    parts = [f"step:{step}"]
    parts += [f"{k}:{pprint.pformat(v)}" for k, v in items if isinstance(v, numbers.Number)]
    return " - ".join(parts)


def console_step_line(items: list[tuple[str, Any]]) -> str:
    """A training step as verl's console logger prints it: `step:3 - training/global_step:3 - key:value - ...`."""
    return verl_console_line(items, step=dict(items).get("training/global_step", 0))


def console_val_metrics(sim: SimSettings, step: int, total: int, test_freq: int, pass_n: int) -> list[tuple[str, Any]]:
    """The current public AgentJet's validation keys: task goal completion `TGC@k` under
    `val-core/<source>/`, no step key, numpy values (printed, never written to a file)."""
    p1 = reward(sim, step, total, test_freq)
    pass_n = max(pass_n, 1)
    items: list[tuple[str, Any]] = [("val-core/gsm8k/reward/mean@" + str(pass_n), NpFloat(p1))]
    k = 1
    while k <= pass_n:
        items.append((f"val-core/gsm8k/TGC@{k}", NpFloat(1 - (1 - p1) ** (0.55 * k + 0.45))))
        k *= 2
    items.append(("val-aux/gsm8k/reward/std@" + str(pass_n), NpFloat(math.sqrt(p1 * (1 - p1)))))
    items.append(("val-aux/num_tasks", sim.val_total_tasks))
    return items


def console_val_step_line(step: int, items: list[tuple[str, Any]]) -> str:
    """verl's console logger at a test step: the validation keys join the step line."""
    return verl_console_line(items, step=step)
