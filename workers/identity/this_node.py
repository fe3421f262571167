"""This node's identity and GPUs."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ajet_runner.store.naming import DEFAULT_QUEUE, node_queue, queue_names

if TYPE_CHECKING:
    from ajet_runner.store.store import Store

__all__ = ["DEFAULT_QUEUE", "HEARTBEAT_SECONDS", "NodeInfo", "detect_gpus", "node_queue", "queue_names"]

HEARTBEAT_SECONDS = 2.0  # the drain is read in the same round trip (Nodes.heartbeat)


def detect_gpus() -> int:
    """GPUs that `nvidia-smi` lists; 0 when there is no nvidia-smi (a CPU-only node)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return 0
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


@dataclass(frozen=True)
class NodeInfo:
    """`gpus == 0` means GPUs are not managed here: experiments run without CUDA_VISIBLE_DEVICES."""

    name: str
    gpus: int
    slots: int

    @property
    def manages_gpus(self) -> bool:
        return self.gpus > 0

    @classmethod
    def from_settings(cls, name: str, gpus: int | None, slots: int | None) -> NodeInfo:
        total = detect_gpus() if gpus is None else max(0, gpus)
        return cls(name=name, gpus=total, slots=slots or (total if total else 2))


def heartbeat(store: Store, node: NodeInfo, running: list[str], started_at: float, *, executor: str = "local",
              hosts: list[str] | None = None) -> bool:
    """One heartbeat of the node (plus the GPU owners on a GPU node); returns whether the node is drained.
    Here, not in the supervisor's module, so `ajet-runner worker` can send its first one before importing
    the supervisor (a worker is listed within a second of its start: issue 39)."""
    busy = len(store.slots.gpu_owners(node.name)) if node.manages_gpus else 0
    fields: dict[str, Any] = {"gpus": node.gpus, "gpus_busy": busy, "slots": node.slots, "pid": os.getpid(),
                              "running": running, "started_at": started_at, "executor": executor,
                              "hosts": hosts or []}
    return store.nodes.heartbeat(node.name, fields, ttl=HEARTBEAT_SECONDS, with_drain=True)
