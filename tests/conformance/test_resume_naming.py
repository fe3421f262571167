"""The runner's idea of AgentJet's experiment names and verl's checkpoint dir, checked against the REAL
agentjet==0.0.1 code (`prepare_experiment_config`, `align_parameters`) in the conformance venv
(scripts/conformance-venv.sh; AJET_CONF_VENV or build/conformance-venv). GPU stand-ins only; no trainer.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ajet_runner.statemachine.checkpoints import checkpoint_dir, explicit_name, parse_start
from ajet_runner.statemachine.logtext import clean_line
from ajet_runner.workers.repair.gpus import launcher_skip_support

REPO = Path(__file__).resolve().parents[2]
CONFIGS = REPO / "tests" / "conformance" / "configs"
STANDINS = REPO / "tests" / "conformance" / "standins"
VENV = Path(os.environ.get("AJET_CONF_VENV") or REPO / "build" / "conformance-venv")
PY = VENV / "bin" / "python"

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not PY.exists(), reason=f"no conformance venv at {VENV} "
                                                   "(scripts/conformance-venv.sh builds it)")]

SCRIPT = r"""
import json, os, shutil, sys
from ajet.utils.config_utils import align_parameters, prepare_experiment_config
from omegaconf import OmegaConf
fp, base, name, cfg = prepare_experiment_config(os.path.abspath(sys.argv[1]), "saved_experiments", "verl")
shutil.copyfile(fp, "aligned.yaml")
align_parameters(fp, "aligned.yaml", "ajet/default_config/verl/config_auto_convertion_verl.jsonc", "verl")
trainer = OmegaConf.load("aligned.yaml").trainer
print("RESULT " + json.dumps({"name": name, "local_dir": str(trainer.default_local_dir),
                              "resume_mode": str(trainer.resume_mode)}))
"""


def run_real(workdir: Path, yaml_name: str) -> tuple[dict, list[str]]:
    env = {**os.environ, "PYTHONPATH": str(STANDINS)}
    done = subprocess.run([str(PY), "-c", SCRIPT, yaml_name], cwd=workdir, env=env, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    [line] = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    return json.loads(line[len("RESULT "):]), [clean_line(x) for x in (done.stdout + done.stderr).splitlines()]


@pytest.fixture()
def codebase(tmp_path: Path) -> Path:
    shutil.copytree(CONFIGS / "codebase", tmp_path, dirs_exist_ok=True)
    return tmp_path


def test_an_unnamed_experiment_gets_the_name_and_checkpoint_dir_the_runner_expects(codebase: Path) -> None:
    shutil.copyfile(CONFIGS / "minimal.yaml", codebase / "math.yaml")
    data = yaml.safe_load((codebase / "math.yaml").read_text())
    assert explicit_name(data) is None
    real, log = run_real(codebase, "math.yaml")
    facts = parse_start(log)  # the runner reads the name from the log, as it does from an attempt's
    assert facts.experiment_name == real["name"] and real["name"].startswith("math_")
    assert len(real["name"]) == len("math_YYYYmmdd_HHMM")
    assert checkpoint_dir(data, real["name"], str(codebase)) == os.path.normpath(codebase / real["local_dir"])
    assert real["resume_mode"] == "auto"


def test_a_pinned_name_is_kept_verbatim_so_the_same_checkpoint_dir_is_used(codebase: Path) -> None:
    data = yaml.safe_load((CONFIGS / "minimal.yaml").read_text())
    data["ajet"]["experiment_name"] = "math_20260129_1741"  # what a repair pins
    data["ajet"]["trainer_common"]["checkpoint_base_dir"] = str(codebase / "results" / "checkpoints")  # isolated
    (codebase / "math.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    real, log = run_real(codebase, "math.yaml")
    assert real["name"] == "math_20260129_1741" == parse_start(log).experiment_name
    assert checkpoint_dir(data, real["name"], str(codebase)) == os.path.normpath(real["local_dir"])


def test_agentjet_0_0_1_has_no_skip_flag_and_the_runner_sees_that(codebase: Path) -> None:
    supported, where = launcher_skip_support(str(codebase), str(PY))
    assert supported is False and where.endswith("ajet/launcher.py") and "site-packages" in where
