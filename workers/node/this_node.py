"""This node's identity and GPUs."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from ajet_runner.store.naming import DEFAULT_QUEUE, node_queue, queue_names

__all__ = ["DEFAULT_QUEUE", "NodeInfo", "detect_gpus", "node_queue", "queue_names"]


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
