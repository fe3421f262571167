"""The names of the files a run leaves in its result dir, for everyone who writes, moves or serves them."""

from __future__ import annotations

REPORT_NAME = "experiment_report.md"
RESULTS_NAME = "results.json"
PLOT_NAME = "reward_plot.png"
REPAIR_LOG_NAME = "repair_log.md"
LOGS_DIR = "logs"
