"""The runner's resume facts against the REAL agentjet 0.0.1 launcher (tests/conformance/harness.py):
the name AgentJet gives an unnamed experiment, read back from the log as the runner reads an attempt's,
verl's checkpoint dir as the runner computes it, and a relaunch whose YAML copy pins that name — the
change the runner's repair makes (workers/repair/resume.py) — resuming at the checkpoint's step.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml

from ajet_runner.statemachine.logs.checkpoints import checkpoint_dir, explicit_name, parse_start
from ajet_runner.statemachine.logs.text import clean_line
from ajet_runner.statemachine.models import ConfigChange
from ajet_runner.workers.repair.config_patch import patch_yaml_text
from ajet_runner.workers.repair.gpus import launcher_skip_support
from ajet_runner.workers.repair.resume import latest_checkpoint
from tests.conformance import harness

pytestmark = [pytest.mark.conformance, pytest.mark.slow, pytest.mark.timeout(1200)]


def lines_of(stdout: str) -> list[str]:
    return [clean_line(x) for x in stdout.splitlines()]


def test_an_oom_after_a_checkpoint_resumes_at_its_step_once_the_name_is_pinned(codebase: Path, make_env) -> None:
    data = yaml.safe_load((codebase / "minimal.yaml").read_text())  # save_freq 2, 6 steps, no name
    assert explicit_name(data) is None
    env = make_env(extra={"AJET_CONF_FAIL_AT_STEP": "5", "AJET_CONF_FAIL_KIND": "cuda_oom"})
    first = harness.run_launcher(codebase, "--conf", "./minimal.yaml", env=env)
    assert first.returncode == 1, first.stdout[-3000:]
    facts = parse_start(lines_of(first.stdout))
    assert re.fullmatch(r"minimal_\d{8}_\d{4}", facts.experiment_name) and facts.start_step == 0
    ckpt = checkpoint_dir(data, facts.experiment_name, str(codebase))
    assert ckpt == os.path.normpath(codebase / "saved_checkpoints" / "conformance" / facts.experiment_name)
    assert latest_checkpoint(ckpt) == 4  # the tracker file verl wrote (no newline), naming global_step_4

    # The repair's change: the name pinned in a copy beside the original (the user's file untouched).
    text = (codebase / "minimal.yaml").read_text()
    pin = ConfigChange(key="ajet.experiment_name", old=None, new=facts.experiment_name, reason="resume")
    copy = codebase / ".ajet-runner" / "exp" / "minimal.yaml"
    copy.parent.mkdir(parents=True)
    copy.write_text(patch_yaml_text(text, [pin]))
    second = harness.run_launcher(codebase, "--conf", "./.ajet-runner/exp/minimal.yaml", env=make_env())
    assert second.returncode == 0, second.stdout[-3000:]
    again = parse_start(lines_of(second.stdout))
    assert again.experiment_name == facts.experiment_name and again.start_step == 4
    assert again.resumed_from.endswith(f"saved_checkpoints/conformance/{facts.experiment_name}/global_step_4")
    assert (codebase / "minimal.yaml").read_text() == text


def test_agentjet_0_0_1_has_no_skip_flag_and_the_runner_sees_that(codebase: Path, conf_python: str) -> None:
    supported, where = launcher_skip_support(str(codebase), conf_python)
    assert supported is False and where.endswith("ajet/launcher.py") and "site-packages" in where
