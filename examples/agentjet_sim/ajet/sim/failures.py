"""The failure catalogue: realistic error text per signature, and when an injection fires.

Each signature belongs to a phase: `launcher` (before the trainer starts: the launcher
itself dies), `init` (trainer start-up: Ray/vLLM/dataset) or `step` (during a training
step). Repairs a person would make lift some failures (see `conditions_hold`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ajet.sim import state
from ajet.sim.config import Injection, get

ATTENTION_HEADS = 28  # Qwen2.5-7B's; tp_heads_mismatch fires while tensor_model_parallel_size does not divide it
SITE = "/opt/conda/envs/ajet/lib/python3.10/site-packages"


@dataclass
class FailureContext:
    cfg: dict[str, Any]
    step: int
    worker_pid: int
    runner_pid: int
    flags: set[str]


def _worker_traceback(frames: list[tuple[str, int, str, str]], last: str) -> list[tuple[str, str]]:
    lines = [("WorkerDict", "Traceback (most recent call last):")]
    for path, line, func, code in frames:
        lines.append(("WorkerDict", f'  File "{path}", line {line}, in {func}'))
        lines.append(("WorkerDict", f"    {code}"))
    lines.append(("WorkerDict", last))
    return lines


def _driver_tail(exc: str) -> list[tuple[str, str]]:
    """What the trainer's main process prints when a remote call raised."""
    return [
        ("", "Error executing job with overrides: []"),
        ("", "Traceback (most recent call last):"),
        ("", f'  File "{os.getcwd()}/ajet/backbone/main_verl.py", line 64, in main'),
        ("", "    run_ppo(config)"),
        ("", f'  File "{SITE}/ray/_private/worker.py", line 2822, in get'),
        ("", "    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)"),
        ("", exc),
        ("", ""),
        ("", "Set the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace."),
    ]


def cuda_oom(ctx: FailureContext) -> list[tuple[str, str]]:
    alloc = 2.0 + (int(get(ctx.cfg, "ajet.rollout.max_model_len", 18000)) / 4096)
    tail = (
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc:.2f} GiB. GPU 3 has a total "
        "capacity of 79.14 GiB of which 1.87 GiB is free. Including non-PyTorch memory, this process has "
        "77.26 GiB memory in use. Of the allocated memory 71.02 GiB is allocated by PyTorch, and 4.61 GiB is "
        "reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )
    frames = [
        (f"{SITE}/verl/single_controller/base/decorator.py", 549, "inner", "return func(*args, **kwargs)"),
        (f"{SITE}/verl/workers/fsdp_workers.py", 662, "update_actor", "metrics = self.actor.update_policy(data=data)"),
        (f"{SITE}/verl/workers/actor/dp_actor.py", 431, "update_policy", "loss.backward()"),
        (f"{SITE}/torch/_tensor.py", 626, "backward", "torch.autograd.backward("),
    ]
    exc = (
        "ray.exceptions.RayTaskError(OutOfMemoryError): ray::WorkerDict.actor_rollout_update_actor() "
        f"(pid={ctx.worker_pid}, ip=10.0.0.12, actor_id=8c1e5f0e4b3a2d1c9f7e6a5b01000000, "
        "repr=<verl.single_controller.ray.base.WorkerDict object at 0x7f3b2c1d4e50>)"
    )
    return _worker_traceback(frames, tail) + [("TaskRunner", exc)] + _driver_tail(exc + "\n" + tail)


def vllm_kv_cache(ctx: FailureContext) -> list[tuple[str, str]]:
    mml = int(get(ctx.cfg, "ajet.rollout.max_model_len", 18000))
    kv = max(mml // 2, 1024)
    msg = (
        f"ValueError: The model's max seq len ({mml}) is larger than the maximum number of tokens that can be "
        f"stored in KV cache ({kv}). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` "
        "when initializing the engine."
    )
    frames = [
        (f"{SITE}/vllm/v1/engine/core.py", 83, "__init__", "self._initialize_kv_caches(vllm_config)"),
        (f"{SITE}/vllm/v1/core/kv_cache_utils.py", 528, "check_enough_kv_cache_memory", "raise ValueError("),
    ]
    return (
        [("WorkerDict", "INFO [gpu_model_runner.py:1892] Model loading took 14.25 GiB and 9.87 seconds")]
        + _worker_traceback(frames, msg)
        + _driver_tail("ray.exceptions.RayTaskError(ValueError): ray::WorkerDict.actor_rollout_init_model()\n" + msg)
    )


def nccl_timeout(ctx: FailureContext) -> list[tuple[str, str]]:
    seq = 1500 + ctx.step * 7
    return [
        (
            "WorkerDict",
            f"[rank3]:[E{ctx.step:04d} ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum={seq}, OpType=_ALLGATHER_BASE, NumelIn=8716288, NumelOut=69730304, "
            "Timeout(ms)=600000) ran for 600071 milliseconds before timing out.",
        ),
        ("WorkerDict", "[rank3]:[E ProcessGroupNCCL.cpp:2168] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
         "Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught collective "
         "operation timeout"),
        ("WorkerDict", "terminate called after throwing an instance of 'c10::DistBackendError'"),
        ("", "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."),
        ("", f"\tclass_name: create_colocated_worker_cls.<locals>.WorkerDict\n\tpid: {ctx.worker_pid}"),
    ]


def network_unreachable(ctx: FailureContext) -> list[tuple[str, str]]:
    ds = get(ctx.cfg, "ajet.task_reader.huggingface_dat_repo.dataset_path", "gsm8k")
    frames = [
        (f"{os.getcwd()}/ajet/task_reader/hf_dataset_reader.py", 41, "load", "dataset = datasets.load_dataset(path)"),
        (
            f"{SITE}/huggingface_hub/file_download.py",
            1646,
            "_raise_on_head_call_error",
            "raise LocalEntryNotFoundError(",
        ),
    ]
    return [
        ("TaskRunner", "Failed to load dataset from huggingface hub, retrying (1/3) ..."),
        ("TaskRunner", "Failed to load dataset from huggingface hub, retrying (2/3) ..."),
        ("TaskRunner", "Failed to load dataset from huggingface hub, retrying (3/3) ..."),
        *[("TaskRunner", text) for _, text in _worker_traceback(frames, "")[:-1]],
        (
            "TaskRunner",
            "huggingface_hub.errors.LocalEntryNotFoundError: An error happened while trying to locate the file "
            "on the Hub and we cannot find the requested files in the local cache.",
        ),
        (
            "TaskRunner",
            f"OSError: We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them "
            f"in the cached files. Check your internet connection or see how to run the library in offline mode "
            f"at 'https://huggingface.co/docs/transformers/installation#offline-mode'. (dataset: {ds})",
        ),
    ] + _driver_tail("OSError: We couldn't connect to 'https://huggingface.co' to load the files.")


def execute_test_probe(ctx: FailureContext) -> list[tuple[str, str]]:
    msg = (
        f"[TestProbe] Reward test failed at step {ctx.step}: local average reward 0.3127 not in expected "
        "range [0.45, 99999.0]"
    )
    return [
        ("TaskRunner", f"[TestProbe] Step {ctx.step}: local average reward over last 5 steps: 0.3127, "
         "expected range: [0.45, 99999.0]"),
        ("TaskRunner", msg),
        ("", "Traceback (most recent call last):"),
        ("", f'  File "{os.getcwd()}/ajet/utils/testing_utils.py", line 251, in __call__'),
        ("", "    raise TestFailException(err)"),
        ("", f"ajet.utils.testing_utils.TestFailException: {msg}"),
    ]


def host_oom(ctx: FailureContext) -> list[tuple[str, str]]:
    return [
        ("raylet", "node_manager.cc:3193: 1 Workers (tasks / actors) killed due to memory pressure (OOM), 0 "
         "Workers crashed due to other reasons at node (ID: 5f2c0a7e, IP: 10.0.0.12) over the last time "
         "period. To see more information about the Workers killed on this node, use `ray logs raylet.out "
         "-ip 10.0.0.12`"),
        ("", "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."),
        ("", "Memory on the node (IP: 10.0.0.12, ID: 5f2c0a7e) where the task (actor ID: 3e1d, name=EnvWorker) "
         "was running was 1007.21GB / 1007.70GB (0.999513), which exceeds the memory usage threshold of 0.95."),
        ("", "Killed"),
    ]


def prompt_too_long(ctx: FailureContext) -> list[tuple[str, str]]:
    limit = int(get(ctx.cfg, "ajet.data.max_prompt_length", 3000))
    msg = (
        f"AssertionError: Sample has prompt_ids length {limit + 412} > max_prompt_length {limit}, please "
        "increase `ajet.data.max_prompt_length` (and keep prompt + response within `max_model_len`)"
    )
    frames = [(f"{os.getcwd()}/ajet/context_tracker/base_tracker.py", 318, "to_samples", "assert len(p) <= limit")]
    return [(a, t) for a, t in _worker_traceback(frames, msg)] + _driver_tail(msg)


def gpu_count_mismatch(ctx: FailureContext) -> list[tuple[str, str]]:
    want = int(get(ctx.cfg, "ajet.trainer_common.n_gpus_per_node", 8)) * int(
        get(ctx.cfg, "ajet.trainer_common.nnodes", 1)
    )
    have = available_gpus(ctx.cfg)
    msg = f"ValueError: Total available GPUs {have} is less than total desired GPUs {want}."
    frames = [(f"{SITE}/verl/trainer/ppo/ray_trainer.py", 214, "_check_resource_available", "raise ValueError(")]
    return [("TaskRunner", t) for _, t in _worker_traceback(frames, msg)] + _driver_tail(msg)


def python_traceback(ctx: FailureContext) -> list[tuple[str, str]]:
    frames = [
        (f"{os.getcwd()}/tutorial/example_math_agent/math_agent.py", 87, "execute", "answer = result.get('answer')"),
    ]
    msg = "AttributeError: 'NoneType' object has no attribute 'get'"
    return [("TaskRunner", t) for _, t in _worker_traceback(frames, msg)] + _driver_tail(msg)


def tp_heads_mismatch(ctx: FailureContext) -> list[tuple[str, str]]:
    """Not in the runner's catalogue on purpose: the failure an LLM adviser is for."""
    tp = get(ctx.cfg, "ajet.rollout.tensor_model_parallel_size", 1)
    heads = ATTENTION_HEADS
    msg = (f"ValueError: Total number of attention heads ({heads}) must be divisible by tensor "
           f"parallel size ({tp}).")
    frames = [
        (f"{SITE}/vllm/engine/llm_engine.py", 412, "_verify_args", "self.model_config.verify_with_parallel_config("),
        (f"{SITE}/vllm/config.py", 486, "verify_with_parallel_config", "raise ValueError("),
    ]
    return [("TaskRunner", t) for _, t in _worker_traceback(frames, msg)] + _driver_tail(msg)


def python_module_missing(ctx: FailureContext) -> list[tuple[str, str]]:
    """A venv that is not AgentJet's: the first import of a dependency fails."""
    return [
        ("", "Traceback (most recent call last):"),
        ("", '  File "<frozen runpy>", line 198, in _run_module_as_main'),
        ("", f'  File "{os.getcwd()}/ajet/backbone/main_verl.py", line 21, in <module>'),
        ("", "    import ray"),
        ("", "ModuleNotFoundError: No module named 'ray'"),
    ]


def nvidia_smi_missing(ctx: FailureContext) -> list[tuple[str, str]]:
    return [
        ("", "/bin/sh: 1: nvidia-smi: not found"),
        ("", "Traceback (most recent call last):"),
        ("", f'  File "{os.getcwd()}/ajet/utils/launch_utils.py", line 305, in check_avail_gpu'),
        ("", '    out = subprocess.check_output(["nvidia-smi", "--query-gpu=memory.used,memory.total"])'),
        ("", "FileNotFoundError: [Errno 2] No such file or directory: 'nvidia-smi'"),
    ]


def backbone_env_mismatch(ctx: FailureContext) -> list[tuple[str, str]]:
    return [("", "ERROR | ajet.utils.launch_utils:verify_python_env:88 - Python environment does not match "
             "current backbone 'trinity'. Please install AgentJet with `uv pip install -e .[trinity]`.")]


def trinity_force_stop(ctx: FailureContext) -> list[tuple[str, str]]:
    return [
        ("Explorer", "ERROR explorer.py:188 Explorer failed: rollout engine unreachable"),
        ("Trainer", "WARNING trainer.py:144 Waiting for experiences from the explorer ... "
         "You can force stop the Trainer process by pressing Ctrl+C."),
    ]


BENIGN = "benign"  # not a failure: lines that only look like one (an echoed env var, a caught OOM, ...)


def benign_lines(inj: Injection, cwd: Path) -> list[str]:
    """What a `benign` injection prints, raw (ANSI and Ray prefixes as written): `lines`, then `file`'s
    lines (relative to the working directory)."""
    lines = list(inj.lines)
    if inj.file:
        path = Path(inj.file) if os.path.isabs(inj.file) else cwd / inj.file
        lines += path.read_bytes().decode("utf-8", "replace").removesuffix("\n").split("\n")
    return lines


# Launcher-phase signatures: printed by the launcher itself (see ajet/launcher.py).
LAUNCHER_PHASE = {"gpu_busy", "ray_already_running", "missing_api_key", "model_path_missing"}
INIT_PHASE = {"vllm_kv_cache", "gpu_count_mismatch", "network_unreachable", "tp_heads_mismatch",
              "python_module_missing", "nvidia_smi_missing", "backbone_env_mismatch"}

TRAINER_TEXT: dict[str, Callable[[FailureContext], list[tuple[str, str]]]] = {
    "cuda_oom": cuda_oom,
    "vllm_kv_cache": vllm_kv_cache,
    "nccl_timeout": nccl_timeout,
    "network_unreachable": network_unreachable,
    "execute_test_probe": execute_test_probe,
    "host_oom": host_oom,
    "prompt_too_long": prompt_too_long,
    "gpu_count_mismatch": gpu_count_mismatch,
    "python_traceback": python_traceback,
    "tp_heads_mismatch": tp_heads_mismatch,
    "python_module_missing": python_module_missing,
    "nvidia_smi_missing": nvidia_smi_missing,
    "backbone_env_mismatch": backbone_env_mismatch,
    "trinity_force_stop": trinity_force_stop,
}

SIGNATURES = sorted(set(TRAINER_TEXT) | LAUNCHER_PHASE)


def available_gpus(cfg: dict[str, Any]) -> int:
    """GPUs Ray would see: the node's count, narrowed by CUDA_VISIBLE_DEVICES when set, plus joined workers'."""
    from ajet.sim.config import sim_settings
    from ajet.sim.ray_cluster import joined_gpus

    node = int(os.environ.get("AJET_SIM_GPUS", sim_settings(cfg).available_gpus))
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [x for x in visible.split(",") if x.strip() and x.strip() != "-1"]
        node = min(len(ids), node)
    return node + joined_gpus()  # a multi-node head also counts the workers that joined it


def phase_of(inj: Injection) -> str:
    if inj.signature == BENIGN:
        return "end" if inj.at_end else "benign"
    if inj.signature in LAUNCHER_PHASE:
        return "launcher"
    if inj.at_step is not None:
        return "step"
    return "init" if inj.signature in INIT_PHASE else "step"


def default_step(inj: Injection) -> int:
    return inj.at_step if inj.at_step is not None else 1


def conditions_hold(inj: Injection, cfg: dict[str, Any], flags: set[str]) -> bool:
    """False when the repair a person would make has been made."""
    c = inj.conditions
    checks = [
        ("max_model_len_ok", "ajet.rollout.max_model_len", lambda v, ok: v > ok),
        ("gpu_memory_utilization_ok", "ajet.rollout.gpu_memory_utilization", lambda v, ok: v > ok),
        ("max_env_worker_ok", "ajet.rollout.max_env_worker", lambda v, ok: v > ok),
        ("train_batch_size_ok", "ajet.data.train_batch_size", lambda v, ok: v > ok),
        ("max_prompt_length_ok", "ajet.data.max_prompt_length", lambda v, ok: v < ok),
    ]
    for key, dotted, bad in checks:
        if key in c and not bad(float(get(cfg, dotted, 0)), float(c[key])):
            return False
    sig = inj.signature
    if sig == "tp_heads_mismatch":
        tp = get(cfg, "ajet.rollout.tensor_model_parallel_size", 1)
        return not (isinstance(tp, int) and not isinstance(tp, bool) and tp > 0 and ATTENTION_HEADS % tp == 0)
    if sig == "network_unreachable" and os.environ.get("SIM_PROXIED") == "1":
        return False
    if sig == "ray_already_running" and "with_ray" not in flags:
        return False
    if sig == "gpu_busy" and "skip_gpu_check" in flags:
        return False
    if sig == "missing_api_key" and (
        get(cfg, "ajet.trainer_common.logger") != "swanlab" or os.environ.get("SWANLAB_API_KEY")
    ):
        return False
    if sig == "cuda_oom" and "expandable_segments_ok" in c:
        return "expandable_segments:True" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    return True


def should_fire(inj: Injection, cfg: dict[str, Any], cwd: Path, experiment: str, flags: set[str]) -> bool:
    """Decide, and record a first-attempt failure so the next attempt passes."""
    if not conditions_hold(inj, cfg, flags):
        return False
    if inj.when == "first_attempt":
        if state.failure_marker(cwd, experiment, inj.signature).exists():
            return False
        state.mark_failed(cwd, experiment, inj.signature)
    return True
