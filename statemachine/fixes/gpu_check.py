"""GPU memory as `nvidia-smi` reports it, and the launcher's rule for a free GPU. Pure.

AgentJet's launcher (`check_avail_gpu`) requires every GPU nvidia-smi lists to have at least 95 % of its
memory free, and it ignores CUDA_VISIBLE_DEVICES. It skips that check when `--autokill` / `--kill` is given
or, in launchers that have the flag, `--skip-check-avail-gpu`. The runner applies the same rule to the GPUs
it knows a run uses (a managed node's slots, or the free GPUs it picked) before it launches with the
check skipped, and says what it saw.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["MIN_FREE_RATIO", "QUERY", "GpuFacts", "GpuMemory", "describe", "free_gpus", "launcher_accepts_skip",
           "parse_query", "parse_visible", "too_busy"]

MIN_FREE_RATIO = 0.95
QUERY = ["--query-gpu=index,name,memory.total,memory.used", "--format=csv,noheader,nounits"]
SKIP_FLAG = "--skip-check-avail-gpu"


@dataclass(frozen=True)
class GpuMemory:
    index: int
    name: str
    total_mib: float
    used_mib: float

    @property
    def free_ratio(self) -> float:
        return max(self.total_mib - self.used_mib, 0.0) / self.total_mib if self.total_mib > 0 else 0.0

    @property
    def free(self) -> bool:
        return self.free_ratio >= MIN_FREE_RATIO


def parse_query(text: str) -> list[GpuMemory]:
    """The rows of `nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader,nounits`.

    Raises ValueError naming the line that does not have that shape.
    """
    gpus = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4:
            raise ValueError(f"unexpected nvidia-smi line {line!r} (want index, name, total MiB, used MiB)")
        try:
            gpus.append(GpuMemory(int(parts[0]), ", ".join(parts[1:-2]), float(parts[-2]), float(parts[-1])))
        except ValueError:
            raise ValueError(f"unexpected nvidia-smi line {line!r} (want index, name, total MiB, used MiB)") from None
    return gpus


def free_gpus(gpus: list[GpuMemory]) -> list[int]:
    return [g.index for g in gpus if g.free]


def too_busy(gpus: list[GpuMemory], wanted: list[int]) -> list[str]:
    """Why each of `wanted` fails the launcher's rule (not listed = missing); empty when all pass."""
    by_index = {g.index: g for g in gpus}
    out = []
    for index in wanted:
        gpu = by_index.get(index)
        if gpu is None:
            out.append(f"GPU {index} is not listed by nvidia-smi")
        elif not gpu.free:
            out.append(f"GPU {index} is {gpu.free_ratio * 100:.1f} % free (< {MIN_FREE_RATIO * 100:.0f} %)")
    return out


def describe(gpus: list[GpuMemory], only: list[int] | None = None) -> str:
    """`GPU 0: 41.2 % free, GPU 1: 99.8 % free` (the GPUs in `only`, else all)."""
    shown = [g for g in gpus if only is None or g.index in only]
    return ", ".join(f"GPU {g.index}: {g.free_ratio * 100:.1f} % free" for g in shown) or "no GPU listed"


def parse_visible(value: str | None) -> list[int] | None:
    """CUDA_VISIBLE_DEVICES as GPU indexes; None when unset or not plain indexes (UUIDs, MIG names)."""
    if value is None:
        return None
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not all(v.isdigit() for v in items):
        return None
    return [int(v) for v in items]


def launcher_accepts_skip(source: str) -> bool:
    """Whether an AgentJet launcher's source defines `--skip-check-avail-gpu` (agentjet 0.0.1 on PyPI does
    not: argparse there stops with `unrecognized arguments`; the repository's launcher does)."""
    return SKIP_FLAG in source


@dataclass(frozen=True)
class GpuFacts:
    """What the runner knows about a run's GPUs when it plans a repair (gathered by the worker).

    `assigned`: the GPUs a managed node gave the run (None: the node does not manage GPUs).
    `listed`: what nvidia-smi reports now (None: not available, `unavailable` says why).
    `needed`: GPUs per node the run asks for. `skip_flag`: the launcher accepts --skip-check-avail-gpu.
    """

    assigned: list[int] | None = None
    listed: list[GpuMemory] | None = None
    unavailable: str = ""
    needed: int = 1
    skip_flag: bool = True
    current: list[int] | None = field(default=None)  # CUDA_VISIBLE_DEVICES the runner set already
