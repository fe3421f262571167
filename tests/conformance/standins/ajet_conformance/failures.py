"""Failure and warning injection for the stand-in trainer (knobs `fail_at_step`, `warn_at_step`).

The exception texts follow what the failing libraries print (PyTorch's CUDA caching allocator,
vLLM's engine checks, NCCL's watchdog, huggingface_hub), written for this tier from their
public error messages so the runner's failure catalogue meets the shapes it matches; they are
not produced by those libraries here. Each fatal kind runs inside the TaskRunner emulation, so
it leaves the trainer as Ray would deliver it (see rayemu.ray_task_error), then through Hydra
and the launcher's own `Error running subprocess: ...` line.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def _torch_oom():
    import torch

    return torch.OutOfMemoryError(
        "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.25 GiB of which "
        "1.06 GiB is free. Including non-PyTorch memory, this process has 78.18 GiB memory in use. Of the "
        "allocated memory 74.52 GiB is allocated by PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def _vllm_kv_cache():
    return ValueError(
        "The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV "
        "cache (21024). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
        "the engine."
    )


def _vllm_no_blocks():
    return ValueError(
        "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
        "the engine."
    )


def _nccl_timeout():
    return RuntimeError(
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2741, OpType=ALLREDUCE, "
        "NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600046 milliseconds before timing out."
    )


def _hf_network():
    return OSError(
        "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached "
        "files. Check your internet connection or see how to run the library in offline mode at "
        "'https://huggingface.co/docs/transformers/installation#offline-mode'."
    )


def _generic():
    return RuntimeError("ajet-runner conformance: injected failure")


RAISING = {
    "cuda_oom": _torch_oom,
    "vllm_kv_cache": _vllm_kv_cache,
    "vllm_no_blocks": _vllm_no_blocks,
    "nccl_timeout": _nccl_timeout,
    "hf_network": _hf_network,
    "exception": _generic,
}
# Not exceptions: `sigkill` (the process dies as the kernel's OOM killer would do it),
# `exit3` (the trainer exits with status 3), `hang` (no output, no progress, until killed).
KINDS = (*RAISING, "sigkill", "exit3", "hang")

WARNINGS = {
    # A caught OOM that is retried: mentions the failure kind, is not a failure.
    "benign_oom": "WARNING: CUDA out of memory during log-prob computation (micro batch 8), retrying with micro "
    "batch 4; set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to reduce fragmentation.",
    # vLLM's start-up advice, printed on every healthy start.
    "vllm_advice": "INFO: Reduce `max_num_seqs` or `max_model_len`, or increase `gpu_memory_utilization`, to avoid "
    "CUDA out of memory errors during CUDA graph capture.",
    "connection_retry": "WARNING: Retrying (Retry(total=4, connect=None, read=None, redirect=None, status=None)) "
    "after connection broken by 'NewConnectionError': /api/v1/log",
}


def maybe_warn(knobs: dict, step: int) -> None:
    if knobs.get("warn_at_step") is not None and int(knobs["warn_at_step"]) == step:
        print(WARNINGS.get(knobs["warn_kind"], str(knobs["warn_kind"])), flush=True)


def maybe_fail(knobs: dict, step: int) -> None:
    if knobs.get("fail_at_step") is None or int(knobs["fail_at_step"]) != step:
        return
    once = knobs.get("fail_once")
    if once:
        if os.path.exists(once):
            return  # failed once already: this relaunch gets past it
        with open(once, "w", encoding="utf-8") as fh:
            fh.write(f"failed at step {step}\n")
    kind = knobs["fail_kind"]
    sys.stdout.flush()
    sys.stderr.flush()
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "exit3":
        os._exit(3)
    if kind == "hang":
        while True:
            time.sleep(3600)
    factory = RAISING.get(kind)
    if factory is None:
        raise ValueError(f"unknown AJET_CONF_FAIL_KIND {kind!r}; known: {', '.join(KINDS)}")
    raise factory()
