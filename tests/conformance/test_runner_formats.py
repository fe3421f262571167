"""The fast part of the conformance tier (it runs in `make test`): printing functions of the REAL packages.

Only the wheels are needed, not the conformance venv: `agentjet==0.0.1` and `verl-bundle==0.5.0.post2`
(the verl agentjet pins) are installed with `pip --no-deps --target build/conformance-light` (seconds;
skipped with the reason when the package index cannot be reached). verl's console logger module
(`verl/utils/logger/aggregate_logger.py`: `concat_dict_to_str`, `LocalLogger`) is loaded from that
wheel in a child process, with the tier's torch stand-in for its `import torch`. Checked:

- examples/agentjet_sim prints its step lines exactly as the real `concat_dict_to_str` prints the
  same dict (training rows, validation rows; the sim's numpy-looking floats against real numpy
  scalars too), and `LocalLogger.log` prints that line;
- our step-line parser reads the real function's output of AgentJet 0.0.1's validation dict (the key
  set of the wheel's own `eval_dataset`, string value included) and of a training dict: validation
  rows and training rows told apart by their keys.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ajet_runner.statemachine.logs.steplines import parse_step_line
from tests.conformance import harness
from tests.conftest import EXAMPLES, REPO

STANDINS = Path(__file__).resolve().parent / "standins"
LIGHT = Path(os.environ.get("AJET_CONF_LIGHT", REPO / "build" / "conformance-light"))
WHEELS = ("agentjet==0.0.1", "verl-bundle==0.5.0.post2")
AGGREGATE_LOGGER = LIGHT / "verl" / "utils" / "logger" / "aggregate_logger.py"


def light_packages() -> Path:
    """The two wheels' files under build/conformance-light (installed once; a marker says it is whole)."""
    marker = LIGHT / ".complete"
    LIGHT.parent.mkdir(parents=True, exist_ok=True)
    with open(LIGHT.parent / (LIGHT.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time (pytest-xdist workers, other sessions)
        if marker.exists() and AGGREGATE_LOGGER.exists():
            return LIGHT
        _install(marker)
    return LIGHT


def _install(marker: Path) -> None:
    LIGHT.mkdir(parents=True, exist_ok=True)
    res = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q",
                          "--upgrade", "--target", str(LIGHT), *WHEELS],
                         capture_output=True, text=True, timeout=600, check=False)
    if res.returncode != 0:
        why = (res.stderr or res.stdout).strip()[-600:]
        reachable, probe = harness._index_reachable(sys.executable, LIGHT.parent / "conformance-light.probe")
        if not reachable:  # the index's own client says it cannot fetch: a skip, with its words
            pytest.skip(f"package index unreachable, cannot fetch {' '.join(WHEELS)}: {probe}")
        raise RuntimeError(f"pip install --target {LIGHT} {' '.join(WHEELS)} failed:\n{why}")
    marker.write_text("\n".join(WHEELS) + "\n")


CHILD = r"""
import contextlib, importlib.util, io, json, sys
spec = importlib.util.spec_from_file_location("real_verl_aggregate_logger", sys.argv[1])
real = importlib.util.module_from_spec(spec)
spec.loader.exec_module(real)
import numpy as np
from ajet.sim import metrics
from ajet.sim.config import SimSettings

sim = SimSettings()
out = {}
train = metrics.train_metrics(sim, 3, 20, 5, 1, 16, 0.51)
out["train"] = [metrics.console_step_line(train), real.concat_dict_to_str(dict(train), step=3)]
val = metrics.console_val_metrics(sim, 10, 20, 5, 4)
out["val"] = [metrics.console_val_step_line(10, val), real.concat_dict_to_str(dict(val), step=10)]
as_numpy = {k: np.float64(float(v)) if isinstance(v, metrics.NpFloat) else v for k, v in val}
out["numpy"] = [metrics.console_val_step_line(10, val), real.concat_dict_to_str(as_numpy, step=10)]
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    real.LocalLogger(print_to_console=True).log(dict(train), step=3)
out["local_logger"] = [metrics.console_step_line(train) + "\n", buf.getvalue()]
# AgentJet 0.0.1's eval_dataset dict (its keys, in its order; numbers as Python and numpy give them).
v001 = {"target dataset name": "main_val_dataset", "pass_n": 4, "total_tasks": 32, "num_all_success_tasks": 2,
        "num_pass_n_tasks(pass@4)": 19, "TGC@1": 0.171875, "TGC@4": np.float64(0.59375),
        "TGC@4-all-pass": 0.0625, "mean_reward": float("nan")}
out["v001_val"] = real.concat_dict_to_str(v001, step=0)
merged = {"critic/score/mean": np.float64(0.25), "actor/pg_loss": -0.0075, "actor/lr": 1e-06, **v001,
          "training/global_step": 7, "timing_s/step": np.float64(0.5), "flag": True}
out["v001_train"] = real.concat_dict_to_str(merged, step=7)
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def printed() -> dict:
    light = light_packages()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(STANDINS), str(EXAMPLES / "agentjet_sim")]),
           "AJET_CONF_REDIRECT": "0"}
    res = subprocess.run([sys.executable, "-c", CHILD, str(light / AGGREGATE_LOGGER.relative_to(LIGHT))],
                         env=env, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)


@pytest.mark.parametrize("case", ["train", "val", "numpy", "local_logger"])
def test_the_sims_step_lines_are_the_real_concat_dict_to_str(printed: dict, case: str) -> None:
    sim, real = printed[case]
    assert sim == real


def test_the_real_functions_validation_row_of_agentjet_0_0_1_is_one_evaluation(printed: dict) -> None:
    line = printed["v001_val"]
    assert "target dataset name" not in line  # strings are left out by the real function
    row = parse_step_line(line)
    assert row is not None and row.step == 0 and row.is_validation and not row.is_training
    assert row.validation["TGC@4"] == 0.59375 and row.validation["num_pass_n_tasks"] == 19
    assert math.isnan(row.validation["mean_reward"])


def test_the_real_functions_merged_training_row_is_both(printed: dict) -> None:
    row = parse_step_line(printed["v001_train"])
    val = parse_step_line(printed["v001_val"])
    assert row is not None and val is not None
    assert row.step == 7 and row.is_training and row.is_validation
    assert row.validation.keys() == val.validation.keys()  # the training keys never leak into the evaluation
    assert row.training["actor/pg_loss"] == -0.0075 and row.training["timing_s/step"] == 0.5
    assert "flag" not in row.validation and "flag" not in row.training  # a bool is a Number, not a metric
