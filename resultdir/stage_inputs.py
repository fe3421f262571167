"""What a stage comparison reads of each experiment: its `results.json` and the YAML it was given.

Read-only, from a result dir: `results.json` (the runner's) and `config.original.yaml` (the user's YAML
as it was at launch; the sweep values are added by statemachine/comparison/compare.py). Files are read only when
their real path is inside the result dir (the rule the console and the API's /log route follow). When
results.json cannot be read here — the experiment is not finished, or this machine does not see that
disk — the record and its evaluation events stand in (`facts_for`).
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import yaml

from ajet_runner.resultdir.names import REPAIR_LOG_NAME, REPORT_NAME, RESULTS_NAME
from ajet_runner.statemachine.blueprint.yamlload import load_yaml_text, private_copy
from ajet_runner.statemachine.comparison.compare import ExperimentFacts, facts_from_record, facts_from_results
from ajet_runner.statemachine.lifecycle import FINISHED

__all__ = ["ORIGINAL_CONFIG", "facts_for", "read_facts", "read_original_config"]

ORIGINAL_CONFIG = "config.original.yaml"  # the user's YAML, copied at launch (workers/drive/states/queued.py)
MAX_BYTES = 20_000_000


def _inside_file(result_dir: str, name: str) -> str | None:
    """The file's path when it exists and its real path is inside the result dir."""
    if not result_dir:
        return None
    path = os.path.join(result_dir, name)
    real, base = os.path.realpath(path), os.path.realpath(result_dir)
    if not real.startswith(base.rstrip("/") + "/") or not os.path.isfile(real):
        return None
    return path


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return None


def read_original_config(result_dir: str) -> dict[str, Any] | None:
    """The YAML the experiment was given, as data; None when absent or unreadable."""
    path = _inside_file(result_dir, ORIGINAL_CONFIG)
    body = _read(path) if path else None
    if body is None:
        return None
    data = _parsed(body)
    return private_copy(data) if isinstance(data, dict) else None


@functools.lru_cache(maxsize=64)
def _parsed(body: str) -> Any:
    """The YAML text parsed once: a sweep's runs were given one YAML, so 200 result dirs hold a few distinct
    texts. libyaml: PyYAML's Python loader took 45 ms a config, 9 s for 200 runs. None when not YAML."""
    try:
        return load_yaml_text(body)  # nesting bounded: a hostile file is unreadable, not a RecursionError
    except yaml.YAMLError:
        return None


def read_facts(result_dir: str) -> ExperimentFacts | None:
    """The experiment in `result_dir` from its results.json (None when there is none readable here)."""
    path = _inside_file(result_dir, RESULTS_NAME)
    body = _read(path) if path else None
    if body is None:
        return None
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep (a file the run could write)
        return None
    if not isinstance(doc, dict) or not doc.get("id"):
        return None
    config = read_original_config(result_dir)
    report = _inside_file(result_dir, REPORT_NAME) or ""
    repair_log = _inside_file(result_dir, REPAIR_LOG_NAME) or ""
    return facts_from_results(doc, config=config, config_source=ORIGINAL_CONFIG if config is not None else "",
                              report_path=report, repair_log_path=repair_log)


def facts_for(records: Iterable[Mapping[str, Any]], evaluations_of: Callable[[str], list[dict[str, Any]]],
              *, read_files: bool = True) -> list[ExperimentFacts]:
    """One ExperimentFacts per record, in order: from its result dir's results.json when it is finished and
    that file is readable here (and is this experiment's), else from the record and `evaluations_of(id)`."""
    return [_facts_of(rec, evaluations_of, read_files=read_files) for rec in records]


def _facts_of(rec: Mapping[str, Any], evaluations_of: Callable[[str], list[dict[str, Any]]], *,
              read_files: bool) -> ExperimentFacts:
    """One record's facts (see `facts_for`)."""
    exp_id = str(rec.get("id") or "")
    result_dir = str(rec.get("result_dir") or "")
    facts = read_facts(result_dir) if read_files and rec.get("state") == FINISHED else None
    if facts is not None and facts.id == exp_id:
        return facts
    # none, or a later run's files (the dir was reused): not this experiment's
    config = read_original_config(result_dir) if read_files else None
    return facts_from_record(rec, evaluations_of(exp_id), config=config,
                             config_source=ORIGINAL_CONFIG if config is not None else "")
