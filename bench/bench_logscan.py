"""How fast LogScanner reads a long AgentJet log, and that its memory stays flat.

Generates a ~200 MB log (ANSI colours, Ray prefixes, tqdm redraws, vLLM chatter, a logged
traceback every few thousand lines, a CUDA OOM near the end), feeds it in 64 KiB chunks and
prints MB/s and peak RSS. Usage: python bench/bench_logscan.py [size_mb]
"""

from __future__ import annotations

import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from ajet_runner.statemachine.failures.diagnose import LogScanner

CHUNK = 64 * 1024
E = "\x1b"


def _block(step: int) -> str:
    """About 4 KB of lines in the mix a real verl + vLLM run prints."""
    bars = "\r".join(
        f"rollout: {p:3d}%|{'█' * (p // 10):<10}| {p}/100 [00:{p:02d}<00:10]" for p in range(0, 101, 20)
    )
    lines = [
        f"{E}[36m(TaskRunner pid=40211){E}[0m step:{step} - actor/pg_loss:0.0132 - critic/score/mean:0.61 - "
        f"response_length/mean:812.4 - timing_s/gen:41.2",
        f"{E}[33m(WorkerDict pid=41877, ip=10.0.0.7){E}[0m INFO 06-12 10:31:02 [loggers.py:118] Engine 000: Avg "
        "prompt throughput: 1520.4 tokens/s, Avg generation throughput: 2210.7 tokens/s, Running: 64 reqs, "
        "Waiting: 0 reqs, GPU KV cache usage: 41.2%, Prefix cache hit rate: 61.2%",
        f"{E}[33m(WorkerDict pid=41878, ip=10.0.0.7){E}[0m INFO 06-12 10:31:12 [loggers.py:118] Engine 001: "
        "Avg prompt throughput: 0.0 tokens/s [repeated 7x across cluster]",
        f"{E}[32m2025-06-12 10:31:12.118{E}[0m | {E}[1mINFO    {E}[0m | ajet.task_runner:run:88 - "
        f"task appworld/{step:06x}_1 finished with reward 1.0 in 12 turns",
        f"{E}[36m(TaskRunner pid=40211){E}[0m {bars}",
    ] * 6
    if step % 50 == 0:
        lines += [
            "(TaskRunner pid=40211) Traceback (most recent call last):",
            '(TaskRunner pid=40211)   File "/root/agentjet/ajet/task_rollout/env_worker.py", line 77, in execute',
            "(TaskRunner pid=40211)     obs = env.step(action)",
            "(TaskRunner pid=40211) requests.exceptions.ReadTimeout: Read timed out. (read timeout=60)",
            "(TaskRunner pid=40211) env worker 12 failed, task will be retried",
        ]
    return "\n".join(lines) + "\n"


def generate(path: Path, size_mb: int) -> int:
    target = size_mb * 1024 * 1024
    written = step = 0
    with path.open("wb") as fh:
        while written < target:
            data = _block(step).encode()
            fh.write(data)
            written += len(data)
            step += 1
        tail = (
            b"(WorkerDict pid=41877) torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.71 GiB\n"
            b"2025-06-12 12:00:00.000 | ERROR    | ajet.utils.launch_utils:execute_training_process:253 - "
            b"Error running subprocess: Command '[python]' returned non-zero exit status 1.\n"
        )
        fh.write(tail)
        written += len(tail)
    return written


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def main() -> None:
    size_mb = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "attempt-1.log"
        size = generate(path, size_mb)
        rss_before = peak_rss_mb()
        scanner = LogScanner()
        start, cpu_start = time.perf_counter(), time.process_time()
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                scanner.feed(chunk)
        scanner.close()
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    cause = scanner.cause
    print(f"log: {size / 1e6:.1f} MB, {scanner.line_count} lines, chunks of {CHUNK // 1024} KiB")
    rate = scanner.line_count / elapsed / 1e3
    print(f"scan: {elapsed:.2f} s = {size / 1e6 / elapsed:.1f} MB/s ({rate:.0f} k lines/s); "
          f"CPU {cpu:.2f} s = {size / 1e6 / cpu:.1f} MB/s of CPU (wall time suffers on a busy host)")
    print(f"peak RSS: {peak_rss_mb():.1f} MB (before scanning: {rss_before:.1f} MB)")
    print(f"findings: {[(f.signature, f.line, f.fatal) for f in scanner.findings]}, counts {scanner.counts}")
    print(f"cause: {cause.signature if cause else None}  (pid {os.getpid()})")
    assert cause is not None and cause.signature == "cuda_oom", "the benchmark log must end in a CUDA OOM"


if __name__ == "__main__":
    main()
