"""The report's plain constants (no pydantic, no store): the markdown helpers and the stage report import them
without loading the report's data model (workers/report/data.py, which re-exports them)."""

from __future__ import annotations

import re

REPORT_VERSION = 1
NA = "n/a"
LOG_TAIL_LINES = 200
CELL_CHARS = 300

COUNT_METRICS = ("num_all_success_tasks", "num_pass_n_tasks", "total_tasks", "pass_n")
DELTA_METRICS = ("mean_reward", "task_pass_rate@1")
RATE_RE = re.compile(r"^task_pass_rate@(\d+)$")
PIPE_RE = re.compile(r"(?<!\\)\|")
CONTROL_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")
