"""The report's plain constants (no pydantic, no store): the markdown helpers and the stage report import them
without loading the report's data model (workers/report/data.py, which re-exports them)."""

from __future__ import annotations

import re

from ajet_runner.statemachine.metric_vocabulary import COUNT_METRICS, DELTA_METRICS

__all__ = ["CELL_CHARS", "CONTROL_RE", "COUNT_METRICS", "DELTA_METRICS", "LOG_TAIL_LINES", "NA", "PIPE_RE",
           "REPORT_VERSION"]

REPORT_VERSION = 1
NA = "n/a"
LOG_TAIL_LINES = 200
CELL_CHARS = 300

PIPE_RE = re.compile(r"(?<!\\)\|")
CONTROL_RE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|[\x00-\x08\x0b-\x1f\x7f]")
