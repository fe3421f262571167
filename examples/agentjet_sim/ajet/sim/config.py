"""Read an experiment YAML the way AgentJet does: hydra-style defaults, then the sim section.

The real launcher edits `defaults:` and `hydra.searchpath` by plain indexing, so a YAML
that lost either key dies with a KeyError traceback; the same indexing is kept here.
"""

from __future__ import annotations

import copy
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class MissingConfigException(Exception):
    """Raised like hydra's own when a `defaults:` entry is not found on the search path."""


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """`over` wins; nested dicts merge key by key."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def read_yaml(path: str | Path) -> dict[str, Any]:
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh)
    return data if isinstance(data, dict) else {}


def read_hierarchical_config(yaml_fp: str, backbone: str) -> dict[str, Any]:
    """Drop the other backbone's defaults, as the real launcher does (same failure modes)."""
    config = read_yaml(yaml_fp)
    drop = {"verl": "trinity", "debug": "trinity", "trinity": "verl"}.get(backbone)
    if drop and f"{drop}_default" in config["defaults"]:
        config["defaults"].remove(f"{drop}_default")
        config["hydra"]["searchpath"].remove(f"file://ajet/default_config/{drop}")
    _ = config["hydra"]["searchpath"]
    return config


def compose(config: dict[str, Any], yaml_fp: str, cwd: Path) -> dict[str, Any]:
    """Merge the defaults list in order; `_self_` is the YAML itself (last = YAML wins)."""
    searchpath = [
        str(p)[len("file://") :] if str(p).startswith("file://") else str(p)
        for p in config["hydra"]["searchpath"]
    ]
    body = {k: v for k, v in config.items() if k not in ("defaults", "hydra")}
    defaults = list(config["defaults"])
    if "_self_" not in defaults:
        defaults.append("_self_")
    merged: dict[str, Any] = {}
    for entry in defaults:
        if entry == "_self_":
            merged = deep_merge(merged, body)
            continue
        if not isinstance(entry, str):
            continue
        for base in searchpath:
            candidate = (cwd / base / f"{entry}.yaml") if not os.path.isabs(base) else Path(base, f"{entry}.yaml")
            if candidate.is_file():
                merged = deep_merge(merged, read_yaml(candidate))
                break
        else:
            name = Path(yaml_fp).stem
            raise MissingConfigException(
                f"In '{name}': Could not find '{entry}'\n\nConfig search path:\n"
                + "\n".join(f"\tprovider=main, path=file://{p}" for p in searchpath)
            )
    merged["hydra"] = config["hydra"]
    merged["defaults"] = config["defaults"]
    return merged


def experiment_name(cfg: dict[str, Any], yaml_fp: str, at: float | None = None) -> str:
    """As AgentJet's prepare_experiment_config: unset or `read_yaml_name` -> `<yaml file name without
    .yaml>_<YYYYmmdd_HHMM>` (local time of `at`, default now); an explicit name as written, `|` -> `-`."""
    name = (cfg.get("ajet") or {}).get("experiment_name") if isinstance(cfg.get("ajet"), dict) else None
    if name is None or name == "read_yaml_name":
        stem = os.path.basename(yaml_fp).replace(".yaml", "")
        return f"{stem}_{time.strftime('%Y%m%d_%H%M', time.localtime(at))}"
    return str(name).replace("|", "-")


def get(cfg: dict[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return default if node is None else node


@dataclass
class Injection:
    """One failure to inject (`ajet_sim.fail`). Conditions, when given, must all hold."""

    signature: str
    at_step: int | None = None
    when: str = "always"
    conditions: dict[str, Any] = field(default_factory=dict)
    # signature "benign": lines printed as they are (from `lines` and/or the file `file`), then training goes on
    lines: list[str] = field(default_factory=list)
    file: str = ""
    line_seconds: float = 0.0  # pause after each line
    then_seconds: float = 0.0  # pause after the last one (no output at all)
    at_end: bool = False  # print after `Final validation metrics` instead of at a step


@dataclass
class SimSettings:
    """The `ajet_sim:` (or `sim:`) section; see examples/agentjet_sim/README.md."""

    step_seconds: float = 0.2
    val_seconds: float | None = None
    startup_seconds: float = 0.3
    seed: int = 0
    reward_start: float = 0.3
    reward_end: float = 0.8
    rise_steps: int | None = None
    noise: float = 0.02
    plateau: bool = False
    plateau_after: int | None = None
    val_total_tasks: int = 1319
    train_dataset_size: int = 7473
    val_format: str = "classic"
    actor_died_at_exit: bool = False
    available_gpus: int = 8
    ray_daemon_seconds: float = 600.0
    probe_step: int = 2
    hang_at_step: int | None = None
    crash_at_step: int | None = None
    crash_exit_code: int = 1
    exit_code: int | None = None
    minutes_apart: bool = False  # each launch's name timestamp one minute after the last (relaunches hours apart)
    fail: list[Injection] = field(default_factory=list)


_CONDITION_KEYS = (
    "max_model_len_ok",
    "gpu_memory_utilization_ok",
    "max_env_worker_ok",
    "max_prompt_length_ok",
    "train_batch_size_ok",
    "expandable_segments_ok",
)


def _injection(raw: dict[str, Any]) -> Injection:
    at = raw.get("at_step")
    lines = raw.get("lines")
    return Injection(
        signature=str(raw.get("signature", "python_traceback")),
        at_step=int(at) if at is not None else None,
        when=str(raw.get("when", "always")),
        conditions={k: raw[k] for k in _CONDITION_KEYS if raw.get(k) is not None},
        lines=[str(x) for x in lines] if isinstance(lines, list) else [],
        file=str(raw.get("file") or ""),
        line_seconds=float(raw.get("line_seconds") or 0.0),
        then_seconds=float(raw.get("then_seconds") or 0.0),
        at_end=bool(raw.get("at_end", False)),
    )


def sim_settings(cfg: dict[str, Any]) -> SimSettings:
    raw = cfg.get("ajet_sim") or cfg.get("sim") or {}
    if not isinstance(raw, dict):
        raw = {}
    settings = SimSettings()
    for name in settings.__dataclass_fields__:
        if name == "fail" or name not in raw or raw[name] is None:
            continue
        current = getattr(settings, name)
        value = raw[name]
        if isinstance(current, bool):
            value = bool(value)
        elif isinstance(current, int) and not isinstance(current, bool):
            value = int(value)
        elif isinstance(current, float):
            value = float(value)
        setattr(settings, name, value)
    fail = raw.get("fail")
    if isinstance(fail, dict):
        settings.fail = [_injection(fail)]
    elif isinstance(fail, list):
        settings.fail = [_injection(f) for f in fail if isinstance(f, dict)]
    return settings


def total_steps(cfg: dict[str, Any], sim: SimSettings) -> tuple[int, int]:
    """(total training steps, steps per epoch), as verl derives them."""
    batch = max(int(get(cfg, "ajet.data.train_batch_size", 32)), 1)
    per_epoch = max(math.ceil(sim.train_dataset_size / batch), 1)
    explicit = get(cfg, "ajet.trainer_common.total_training_steps")
    if explicit is not None:
        return max(int(explicit), 0), per_epoch
    return int(get(cfg, "ajet.trainer_common.total_epochs", 1)) * per_epoch, per_epoch
