"""Knobs of the stand-in trainer: env ``AJET_CONF_<KEY>`` > YAML ``conformance.<key>`` > default.

| key            | default | meaning |
| -------------- | ------- | ------- |
| train_tasks    | 16      | training tasks; steps per epoch = train_tasks // ajet.data.train_batch_size |
|                |         | (verl's train dataloader drops the last partial batch) |
| val_tasks      | 32      | validation tasks used (the first N the real RandomDummyTaskReader yields) |
| curve          | linear  | validation success curve: linear (curve_end < curve_start declines), plateau, flat |
| curve_start    | 0.2     | success probability at step 0 |
| curve_end      | 0.8     | success probability at the last step (plateau: the plateau's height) |
| plateau_at     | 3       | plateau: step from which the curve stays at curve_end |
| sampling       | random  | random: each validation rollout succeeds with the curve's probability (seeded, |
|                |         | reruns print the same); exact: TGC@1 equals the curve to the rollout |
| step_seconds   | 0       | wall time each training step takes (sleep), to make a run last |
| fail_at_step   | (none)  | training step at which `fail_kind` happens |
| fail_kind      | cuda_oom| see ajet_conformance.failures.KINDS |
| fail_once      | (none)  | a marker file: the failure happens only while it does not exist (it is made then), |
|                |         | so a relaunch gets past it, as after a real repair |
| warn_at_step   | (none)  | training step at which a benign warning (`warn_kind`) is printed |
| warn_kind      | benign_oom | see ajet_conformance.failures.WARNINGS |
| ray_prefix     | 1       | prefix the TaskRunner's output with `(TaskRunner pid=N) ` as Ray's log forwarding does |
"""

from __future__ import annotations

import os
from typing import Any

DEFAULTS: dict[str, Any] = {
    "train_tasks": 16,
    "val_tasks": 32,
    "curve": "linear",
    "curve_start": 0.2,
    "curve_end": 0.8,
    "plateau_at": 3,
    "sampling": "random",
    "step_seconds": 0.0,
    "fail_at_step": None,
    "fail_kind": "cuda_oom",
    "fail_once": None,
    "warn_at_step": None,
    "warn_kind": "benign_oom",
    "ray_prefix": 1,
}


def _coerce(value: Any, default: Any) -> Any:
    if value is None or value == "":
        return default if value == "" else None
    if isinstance(default, bool):
        return str(value).lower() in {"1", "true", "yes", "on"}
    if isinstance(default, int) or (default is None and str(value).lstrip("-").isdigit()):
        return int(value)
    if isinstance(default, float):
        return float(value)
    return str(value)


def read(config: Any = None) -> dict[str, Any]:
    """The knobs for one run; `config` is the composed OmegaConf config (or a dict) or None."""
    section: dict[str, Any] = {}
    if config is not None:
        try:
            raw = config.get("conformance", None)
        except AttributeError:
            raw = None
        if raw is not None:
            section = dict(raw.items())
    knobs = {}
    for key, default in DEFAULTS.items():
        env = os.environ.get(f"AJET_CONF_{key.upper()}")
        if env is not None:
            knobs[key] = _coerce(env, default)
        elif key in section:
            knobs[key] = _coerce(section[key], default)
        else:
            knobs[key] = default
    return knobs


def success_probability(knobs: dict[str, Any], step: int, total_steps: int) -> float:
    """Where the validation success rate should be at `step` (0 = before training)."""
    start, end = float(knobs["curve_start"]), float(knobs["curve_end"])
    curve = knobs["curve"]
    if curve == "flat" or total_steps <= 0:
        return start
    if curve == "plateau":
        at = max(1, int(knobs["plateau_at"]))
        return end if step >= at else start + (end - start) * step / at
    return start + (end - start) * min(step, total_steps) / total_steps
