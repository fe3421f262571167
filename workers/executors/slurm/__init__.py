"""The SLURM executor (docs/executors.md#slurm): one attempt is one batch job, submitted by a worker on a
login node; `slurm_cli.py` wraps sbatch/squeue/scontrol/scancel, `batch.py` writes the batch script,
`executor.py` is the executor."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ajet_runner.workers.executors.slurm.slurm_executor import SlurmExecutor

if TYPE_CHECKING:
    from ajet_runner.store.settings import Settings

__all__ = ["SlurmExecutor", "build"]


def build(settings: Settings, host: str | None) -> SlurmExecutor:
    """From the settings (`slurm_partition`, `slurm_args`); SLURM's own variables (SLURM_CONF) are the process's."""
    return SlurmExecutor(partition=settings.slurm_partition, extra_args=settings.slurm_args,
                         look_every=max(0.5, min(settings.poll_interval * 2, 5.0)))
