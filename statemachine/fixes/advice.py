"""An LLM adviser's answer: its schema, and the allow-lists every proposed change must pass.

The adviser is a model, so its answer is untrusted input (and the log it read may have been written
by an attacker to steer it). It may only propose changes of six kinds (set a YAML key under `ajet.`,
unset one of the leaf keys UNSET_ALLOWED names, set an environment variable named on ENV_ALLOWED, add
or remove a known launcher flag, put an allow-listed prefix before the launcher); each is checked
against this experiment's YAML as run.
Nothing may point the run elsewhere: no endpoint, host, proxy or address variable, no file path, URL
or hub id (`org/name`: remote weights and code) as a value, no key that says where something is
(`*_path`, `*_url`, ...), not `ajet.model.path` nor the experiment's name (another run's checkpoint), nor
any key the preflight checks (PREFLIGHT_GUARDED), and never a whole map.
One change outside the rules refuses the whole answer (a partial plan could be incoherent).
Nothing here runs anything: an accepted answer becomes ordinary `RepairAction`s that the resolver
applies like a catalogue plan.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ajet_runner.statemachine.fixes.repairs import MISSING, get_dotted
from ajet_runner.statemachine.models import RepairAction

__all__ = [
    "ADVICE_KINDS",
    "AdviceChange",
    "AdviceError",
    "AdviceRules",
    "AdvisorAnswer",
    "BOOLEAN_FLAGS",
    "ENV_ALLOWED",
    "parse_answer",
    "to_actions",
    "validate_changes",
]

ADVICE_KINDS = ("yaml_set", "yaml_unset", "env_set", "flag_add", "flag_remove", "prefix")
# AgentJet launcher switches that take no value. `--conf`, `--kill`, `--autokill`, `--backbone`
# and `--exp-dir` are never the adviser's to touch.
BOOLEAN_FLAGS = ("--with-ray", "--with-appworld", "--with-deepfinance", "--with-webshop", "--with-bfcl",
                 "--with-crafters", "--with-logview", "--skip-check-avail-gpu")
REMOVABLE_FLAGS = tuple(f for f in BOOLEAN_FLAGS if f.startswith("--with-"))
DEFAULT_PREFIXES = ("proxychains4 -q",)

_YAML_KEY = re.compile(r"^ajet(?:\.[A-Za-z_][A-Za-z0-9_]*)+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# The only environment variables an adviser may set: tuning that changes how the same code runs here
# (allocator and cache sizes, NCCL and torch.distributed tuning, thread counts, offline switches, log
# levels), never where traffic goes, what code loads, or whose credentials are used. Names, not prefixes:
# a prefix such as NCCL_ or VLLM_ also admits NCCL_NET_PLUGIN / VLLM_PLUGINS (code loading),
# NCCL_COMM_ID or VLLM_HOST_IP (re-routing).
ENV_ALLOWED = frozenset({
    # allocators and cache sizes
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF", "PYTORCH_NO_CUDA_MEMORY_CACHING", "MALLOC_ARENA_MAX",
    "MALLOC_TRIM_THRESHOLD_", "VLLM_CPU_KVCACHE_SPACE", "CUDA_MODULE_LOADING", "CUDA_DEVICE_MAX_CONNECTIONS",
    "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_ORDER",
    # NCCL tuning
    "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_IB_DISABLE", "NCCL_SHM_DISABLE", "NCCL_NVLS_ENABLE",
    "NCCL_CUMEM_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_CROSS_NIC", "NCCL_ALGO", "NCCL_PROTO", "NCCL_BUFFSIZE",
    "NCCL_NTHREADS", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_LAUNCH_MODE", "NCCL_SOCKET_NTHREADS",
    "NCCL_NSOCKS_PERTHREAD", "NCCL_IB_TIMEOUT", "NCCL_IB_RETRY_CNT", "NCCL_TIMEOUT", "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS", "NCCL_ASYNC_ERROR_HANDLING", "NCCL_BLOCKING_WAIT",
    # torch.distributed / compile tuning
    "TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
    "TORCH_NCCL_ENABLE_MONITORING", "TORCH_NCCL_AVOID_RECORD_STREAMS", "TORCH_DISTRIBUTED_DEBUG",
    "TORCHINDUCTOR_COMPILE_THREADS", "TORCH_COMPILE_DISABLE",
    # thread counts
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "NUMEXPR_MAX_THREADS",
    "VECLIB_MAXIMUM_THREADS", "RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM",
    # vLLM engine tuning
    "VLLM_ATTENTION_BACKEND", "VLLM_USE_V1", "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_ALLOW_LONG_MAX_MODEL_LEN",
    "VLLM_ENGINE_ITERATION_TIMEOUT_S", "VLLM_USE_TRITON_FLASH_ATTN", "VLLM_DISABLE_CUSTOM_ALL_REDUCE",
    "VLLM_LOGGING_LEVEL",
    # offline switches and timeouts (no endpoints)
    "HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY",
    "HF_HUB_DOWNLOAD_TIMEOUT", "HF_HUB_ETAG_TIMEOUT", "WANDB_MODE", "SWANLAB_MODE",
    # Ray tuning
    "RAY_DEDUP_LOGS", "RAY_memory_monitor_refresh_ms", "RAY_memory_usage_threshold",
})
# Refused with their own reason, whatever the allow-list says: re-routing, shell and loader switches.
_ENV_DENIED_EXACT = frozenset({"PATH", "HOME", "SHELL", "ENV", "BASH_ENV", "IFS", "PS4", "PROMPT_COMMAND",
                               "CUDA_VISIBLE_DEVICES", "VIRTUAL_ENV", "TMUX", "TMPDIR", "USER", "LOGNAME",
                               "RAY_ADDRESS", "MASTER_ADDR", "MASTER_PORT", "SHELLOPTS", "BASHOPTS", "NCCL_COMM_ID",
                               "NCCL_NET_PLUGIN", "NCCL_TUNER_PLUGIN", "VLLM_PLUGINS", "NO_PROXY"})
_ENV_DENIED_PREFIX = ("LD_", "PYTHON", "DYLD_", "AJET_RUNNER_", "BASH_FUNC_")
_ENV_REROUTE = re.compile(r"(?:_BASE_URL|_URL|_URI|_ENDPOINT|_HOST|_HOSTNAME|_ADDR|_ADDRESS|_SERVER|_PORT)$"
                          r"|PROXY", re.IGNORECASE)
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASS|PWD|ACCESS|CREDENTIAL|AUTH", re.IGNORECASE)
# A value that names a file could send AgentJet's writes (or reads) outside the experiment.
_PATH_LIKE = re.compile(r"^\s*(?:/|~|\.{1,2}/)|(?:^|/)\.\.(?:/|$)|^[A-Za-z]:\\|^file:", re.IGNORECASE)
_URL_LIKE = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.-]*://|^\s*(?:www\.|[A-Za-z0-9-]+\.[A-Za-z0-9.-]+:\d+)",
                       re.IGNORECASE)
# `org/name`: a model or dataset id on a hub, i.e. weights and code fetched from elsewhere.
_HUB_ID = re.compile(r"^\s*[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*\s*$")
# YAML keys that say where things are or who is asked: never the adviser's to point elsewhere.
_KEY_DENIED = frozenset({"ajet.model.path", "ajet.experiment_name", "ajet.project_name"})
_KEY_LOCATION = re.compile(r"(?:^|_)(?:url|uri|urls|endpoint|host|hostname|proxy|address|addr|server|api_base|"
                           r"base|port|path|dir|file|root|repo|key|token|secret|password|passwd)$", re.IGNORECASE)
# The only keys an adviser may unset (AgentJet's default then applies): rollout-engine and batch tuning
# whose defaults are safe. Leaves only: unsetting a map (`ajet.model`) falls back to a hub default model,
# unsetting anything else drops what the experiment is about.
UNSET_ALLOWED = frozenset({
    "ajet.rollout.max_model_len", "ajet.rollout.gpu_memory_utilization", "ajet.rollout.tensor_model_parallel_size",
    "ajet.rollout.n_vllm_engine", "ajet.rollout.max_num_seqs", "ajet.rollout.max_num_batched_tokens",
    "ajet.rollout.enforce_eager", "ajet.rollout.enable_chunked_prefill", "ajet.rollout.enable_prefix_caching",
    "ajet.rollout.max_env_worker", "ajet.rollout.max_response_length_in_one_turn",
    "ajet.trainer_common.mini_batch_num",
})
# What the preflight checks or sets (statemachine/fixes/preflight.py, agentjet-notes): never the adviser's to set or
# unset, whether or not the preflight changed it this time (a YAML that already had them right is protected too).
PREFLIGHT_GUARDED = frozenset({
    "ajet.execute_test", "ajet.execute_testing_lambda", "ajet.enable_swarm_mode", "ajet.model.path",
    "ajet.experiment_name", "ajet.project_name", "ajet.trainer_common.val_before_train",
    "ajet.trainer_common.val_print_to_markdown_file_path", "ajet.trainer_common.train_print_to_markdown_file_path",
    "ajet.trainer_common.test_freq", "ajet.trainer_common.logger", "ajet.trainer_common.checkpoint_base_dir",
    "ajet.trainer_common.nnodes", "ajet.trainer_common.n_gpus_per_node",
})
MAX_VALUE_CHARS = 1000
MAX_CHANGES = 20


class AdviceError(ValueError):
    """The answer is not usable: not JSON, not the schema, or a change breaks the rules."""


class AdviceChange(BaseModel):
    """One proposed change, exactly `{"kind", "key", "value"}`."""

    model_config = ConfigDict(extra="forbid")

    kind: str
    key: str = ""
    value: Any = None


class AdvisorAnswer(BaseModel):
    """The whole answer, exactly this schema (a site may plug in any model or tool that speaks it)."""

    model_config = ConfigDict(extra="forbid")

    diagnosis: str
    repairable: bool
    changes: list[AdviceChange] = Field(default_factory=list, max_length=MAX_CHANGES)
    rationale: str


ANSWER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["diagnosis", "repairable", "changes", "rationale"],
    "properties": {
        "diagnosis": {"type": "string"},
        "repairable": {"type": "boolean"},
        "changes": {"type": "array", "maxItems": MAX_CHANGES, "items": {
            "type": "object", "additionalProperties": False, "required": ["kind", "key", "value"],
            "properties": {"kind": {"enum": list(ADVICE_KINDS)}, "key": {"type": "string"}, "value": {}},
        }},
        "rationale": {"type": "string"},
    },
}

_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\r?\n(.*?)```", re.S)


def parse_answer(text: str) -> AdvisorAnswer:
    """The answer in `text`: plain JSON, or JSON inside a ```json fence. Raises AdviceError."""
    body = text.strip()
    if not body.startswith("{"):
        fenced = _FENCE.search(body)
        if fenced is None:
            raise AdviceError(f"the answer is not JSON (starts with {body[:60]!r})")
        body = fenced.group(1).strip()
    try:
        raw = json.loads(body)
    except json.JSONDecodeError as exc:
        raise AdviceError(f"the answer is not valid JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise AdviceError("the answer is not a JSON object")
    try:
        return AdvisorAnswer.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'answer'}: {e['msg']}" for e in exc.errors())
        raise AdviceError(f"the answer does not match the schema: {problems}") from exc


class AdviceRules(BaseModel):
    """What this experiment allows: its YAML as run, the keys the runner set itself, the prefixes."""

    yaml_data: dict[str, Any] = Field(default_factory=dict)
    protected_keys: dict[str, str] = Field(default_factory=dict)  # key -> why the runner set it
    prefixes: tuple[str, ...] = DEFAULT_PREFIXES
    has_launcher: bool = True


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _check_text(value: Any, what: str) -> str | None:
    if isinstance(value, str):
        if len(value) > MAX_VALUE_CHARS:
            return f"{what} is longer than {MAX_VALUE_CHARS} characters"
        if "\n" in value or "\x00" in value or "\r" in value:
            return f"{what} contains a line break or NUL"
        if _PATH_LIKE.search(value):
            return f"{what} {value!r} is a file path (no file may be named by the adviser)"
        if _URL_LIKE.search(value):
            return f"{what} {value!r} is a URL or host (the adviser may not send traffic anywhere)"
        if _HUB_ID.match(value):
            return (f"{what} {value!r} has the shape of a hub id (org/name: weights and code from elsewhere; "
                    "the adviser may not name a model or dataset)")
    return None


def _same_type(current: Any, new: Any) -> bool:
    if isinstance(current, bool) or isinstance(new, bool):
        return isinstance(current, bool) and isinstance(new, bool)
    if isinstance(current, float):
        return isinstance(new, (int, float))
    return type(current) is type(new)


def _guarded(key: str) -> str | None:
    if key in PREFLIGHT_GUARDED:
        return (f"YAML key {key} is one the preflight checks before every launch (test probe, validation output, "
                "model, experiment name, GPUs, logger): never the adviser's to change")
    return None


def _yaml_problem(change: AdviceChange, rules: AdviceRules) -> str | None:
    key = change.key
    if not _YAML_KEY.match(key):
        return f"YAML key {key!r} is not under `ajet.` (only `ajet.<section>.<key>` may be changed)"
    if key in rules.protected_keys:
        return f"YAML key {key} was set by the runner before launch ({rules.protected_keys[key]})"
    if change.kind == "yaml_unset":
        return _guarded(key) or _unset_problem(key, rules, change.value)
    return _set_problem(change, rules) or _guarded(key)


def _set_problem(change: AdviceChange, rules: AdviceRules) -> str | None:
    """yaml_set: one rule after another, the first that fails is the refusal."""
    key = change.key
    values = change.value if isinstance(change.value, list) else [change.value]
    bad = next((p for v in values if (p := _check_text(v, f"the value of {key}"))), None)
    if bad:
        return bad
    problem = _settable_key(key, rules)
    if problem:
        return problem
    current = get_dotted(rules.yaml_data, key, MISSING)
    new = change.value
    if isinstance(current, Mapping) or isinstance(new, Mapping):
        return f"YAML key {key}: a whole map cannot be set, only a single value"
    if isinstance(new, list):
        return _list_problem(key, current, new)
    return _scalar_problem(key, current, new)


def _settable_key(key: str, rules: AdviceRules) -> str | None:
    """Refused keys: the model or experiment's identity, a location or credential, a key under a non-map."""
    if key in _KEY_DENIED:
        return (f"YAML key {key} names which model or experiment this is (other weights, another run's "
                "checkpoint): never the adviser's to change")
    if _KEY_LOCATION.search(key.rsplit(".", 1)[-1]):
        return (f"YAML key {key} says where something is, or whose credential is used (a path, a URL, a host, "
                "a key): never the adviser's to change")
    for k in range(1, len(key.split("."))):
        parent = get_dotted(rules.yaml_data, ".".join(key.split(".")[:k]), MISSING)
        if parent is not MISSING and not isinstance(parent, Mapping):
            return f"YAML key {key}: {'.'.join(key.split('.')[:k])} is not a map, it cannot hold keys"
    return None


def _list_problem(key: str, current: Any, new: list[Any]) -> str | None:
    """A list may replace only a list, and hold only plain values."""
    if not isinstance(current, list):
        return f"YAML key {key}: a list cannot replace a {_type_name(current)}"
    if not all(_is_scalar(x) and not isinstance(x, (dict, list)) for x in new):
        return f"YAML key {key}: only a list of plain values may be set"
    return next((p for x in new if (p := _check_text(x, f"a value in {key}"))), None)


def _scalar_problem(key: str, current: Any, new: Any) -> str | None:
    """A plain value (not null, not NaN, clean text) of the type the key has now."""
    if not _is_scalar(new):
        return f"YAML key {key}: {_type_name(new)} is not a plain value"
    if new is None:
        return f"YAML key {key}: use yaml_unset to remove a key, not null"
    if isinstance(new, float) and new != new:  # NaN
        return f"YAML key {key}: NaN is not a value"
    problem = _check_text(new, f"the value of {key}")
    if problem:
        return problem
    if current is MISSING or current is None:
        return None
    if not _same_type(current, new):
        return f"YAML key {key} is a {_type_name(current)} ({current!r}); {new!r} is a {_type_name(new)}"
    return None


def _unset_problem(key: str, rules: AdviceRules, value: Any = None) -> str | None:
    """yaml_unset: a leaf key of the YAML as run that UNSET_ALLOWED names, never a map."""
    if value is not None:
        return f"yaml_unset of {key} takes no value (got {value!r})"
    current = get_dotted(rules.yaml_data, key, MISSING)
    if isinstance(current, Mapping):
        return (f"YAML key {key} is a whole map ({', '.join(list(map(str, current))[:5])}): unsetting it would put "
                "AgentJet's defaults in its place (a hub default model for ajet.model); only single keys may be unset")
    if key not in UNSET_ALLOWED:
        return (f"YAML key {key} is not one the adviser may unset (only rollout-engine and batch tuning whose "
                f"defaults are safe: {', '.join(sorted(k.rsplit('.', 1)[-1] for k in UNSET_ALLOWED))})")
    if current is MISSING:
        return f"YAML key {key} is not in the YAML, so it cannot be unset"
    return None


def _env_problem(change: AdviceChange) -> str | None:
    name = change.key
    refusal = _env_name_problem(name)
    if refusal is not None:
        return refusal
    value = change.value
    if isinstance(value, bool):
        value = "1" if value else "0"
    if not isinstance(value, (str, int, float)) or value == "":
        return f"environment variable {name} needs a non-empty text or number value (got {value!r})"
    return _check_text(str(value), f"the value of {name}")


def _env_name_problem(name: str) -> str | None:
    """Why the adviser may not set variable `name`: not a name, denied, a route, a secret, or not on ENV_ALLOWED."""
    if not _ENV_NAME.match(name):
        return f"environment variable name {name!r} is not a valid name"
    upper = name.upper()
    if upper in _ENV_DENIED_EXACT or upper.startswith(_ENV_DENIED_PREFIX):
        return f"environment variable {name} may not be overridden by the adviser"
    if _ENV_REROUTE.search(name):
        return (f"environment variable {name} says where traffic goes (an endpoint, host, proxy or address): "
                "the adviser may not re-route the run")
    if _SECRET_NAME.search(name) and name not in ENV_ALLOWED:
        return f"environment variable {name} looks like a secret; the adviser may not set credentials"
    if name not in ENV_ALLOWED:
        return (f"environment variable {name} is not on the adviser's allow-list (allocator and cache sizes, NCCL "
                "and torch.distributed tuning, thread counts, offline switches: see ENV_ALLOWED)")
    return None


def _flag_problem(change: AdviceChange, rules: AdviceRules) -> str | None:
    flag = change.key.strip()
    if not rules.has_launcher:
        return "the command does not run ajet.launcher, so no launcher flag can be changed"
    allowed = BOOLEAN_FLAGS if change.kind == "flag_add" else REMOVABLE_FLAGS
    if flag not in allowed:
        return f"flag {flag!r} is not one the adviser may {'add' if change.kind == 'flag_add' else 'remove'} " \
               f"(allowed: {', '.join(allowed)})"
    if change.value not in (None, True, ""):
        return f"flag {flag} takes no value (got {change.value!r})"
    return None


def _prefix_problem(change: AdviceChange, rules: AdviceRules) -> str | None:
    if not isinstance(change.value, str):
        return f"a prefix must be text (got {change.value!r})"
    prefix = " ".join(change.value.split())
    allowed = [" ".join(p.split()) for p in rules.prefixes]
    if prefix not in allowed:
        return f"prefix {change.value!r} is not on the allow-list ({', '.join(allowed) or 'empty'})"
    if not rules.has_launcher:
        return "the command does not run ajet.launcher, so it cannot be prefixed"
    return None


def change_problem(change: AdviceChange, rules: AdviceRules) -> str | None:
    """Why this change is refused, or None when it is within the rules."""
    if change.kind not in ADVICE_KINDS:
        return f"kind {change.kind!r} is not allowed (allowed: {', '.join(ADVICE_KINDS)})"
    if change.kind in ("yaml_set", "yaml_unset"):
        return _yaml_problem(change, rules)
    if change.kind == "env_set":
        return _env_problem(change)
    if change.kind in ("flag_add", "flag_remove"):
        return _flag_problem(change, rules)
    return _prefix_problem(change, rules)


def validate_changes(changes: Iterable[AdviceChange], rules: AdviceRules) -> list[str]:
    """Every refusal, one line each (`change 2 (env_set PATH): ...`); empty when all are allowed."""
    out = []
    seen: set[tuple[str, str]] = set()
    for i, change in enumerate(changes, 1):
        label = f"change {i} ({change.kind} {change.key or repr(change.value)})"
        problem = change_problem(change, rules)
        target = ("yaml" if change.kind.startswith("yaml") else change.kind, change.key)
        if problem is None and change.kind != "prefix" and target in seen:
            problem = "the same key is changed twice"
        seen.add(target)
        if problem:
            out.append(f"{label}: {problem}")
    return out


def describe_change(change: AdviceChange) -> str:
    """One line a person reads in the repair log."""
    value = json.dumps(change.value, ensure_ascii=False) if change.value is not None else ""
    return {
        "yaml_set": f"set YAML {change.key} = {value}",
        "yaml_unset": f"unset YAML {change.key}",
        "env_set": f"set env {change.key}={change.value}",
        "flag_add": f"add launcher flag {change.key}",
        "flag_remove": f"remove launcher flag {change.key}",
        "prefix": f"run the launcher behind `{change.value}`",
    }.get(change.kind, f"{change.kind} {change.key} {value}".strip())


def to_actions(changes: Iterable[AdviceChange], why: str = "") -> list[RepairAction]:
    """Validated changes as the resolver's actions (call validate_changes first)."""
    actions: list[RepairAction] = []
    for c in changes:
        note = why[:200]
        if c.kind == "yaml_set":
            actions.append(RepairAction(kind="set_yaml", key=c.key, value=c.value, description=note))
        elif c.kind == "yaml_unset":
            actions.append(RepairAction(kind="unset_yaml", key=c.key, description=note))
        elif c.kind == "env_set":
            value = ("1" if c.value else "0") if isinstance(c.value, bool) else str(c.value)
            actions.append(RepairAction(kind="set_env", key=c.key, value=value, description=note))
        elif c.kind == "flag_add":
            actions.append(RepairAction(kind="add_flag", value=c.key.strip(), description=note))
        elif c.kind == "flag_remove":
            actions.append(RepairAction(kind="remove_flag", value=c.key.strip(), description=note))
        elif c.kind == "prefix":
            prefix = " ".join(str(c.value).split())
            actions.append(RepairAction(kind="prefix_command", value=prefix, requires=prefix.split()[0],
                                        description=note))
    return actions
