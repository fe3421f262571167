"""Our runner on the REAL AgentJet 0.0.1 launcher: `ajet-runner run` (real tmux, the embedded Redis)
runs `python -m ajet.launcher` under the conformance stand-ins (tests/conformance/harness.py), whose
trainer prints through the real `eval_dataset` and verl's real console logger.

(a) a 40-step run with `test_freq: 1` prints a verl validation row at every step: all 41 evaluations
    reach the report, `results.json`, the plot, the live `evaluation at step N` events and
    `ajet-runner results` (with and without `results.json`), and its 40 training rows are the
    training steps logged;
(b) a run whose validation reward stops moving is stopped `early_stopped` by the plateau rule.

These runs take a minute each: they run under `make conformance` (AJET_CONFORMANCE=1), not in
`make test`. The tier's figures are printed at the end of the session (`Figures`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conformance import harness

FULL_TIER = pytest.mark.skipif(not os.environ.get("AJET_CONFORMANCE"),
                               reason="a full conformance run (about a minute each): `make conformance` runs it "
                                      "(AJET_CONFORMANCE=1)")
pytestmark = [pytest.mark.conformance, pytest.mark.slow, FULL_TIER]

CLI = [sys.executable, "-m", "ajet_runner"]
VALIDATION_ROW = re.compile(r"^step:(\d+) - .*\bTGC@1:")
TRAINING_ROW = re.compile(r"^step:(\d+) - .*\btraining/global_step:")


# ----------------------------------------------------------------------------- figures
@dataclass
class Figure:
    run: str
    outcome: str
    seen: int  # evaluations the runner kept (results.json)
    expected: int | None  # evaluations the launcher printed (validation rows in the log); None: nothing ran
    train_steps: int
    seconds: float


@dataclass
class Figures:
    """Collected per session and printed after the test summary (run without xdist to see them)."""

    rows: list[Figure] = field(default_factory=list)
    other: list[str] = field(default_factory=list)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.rows and not self.other:
            return
        tr = terminalreporter
        tr.section("conformance figures: ajet-runner on the real agentjet 0.0.1 launcher")
        tr.write_line(f"{'run':<44} {'outcome':<14} {'evaluations seen/expected':>26} {'train steps':>11} "
                      f"{'seconds':>8}")
        for f in self.rows:
            counts = f"{f.seen}/{'n/a' if f.expected is None else f.expected}"
            tr.write_line(f"{f.run:<44} {f.outcome:<14} {counts:>26} {f.train_steps:>11} {f.seconds:>8.1f}")
        for line in self.other:
            tr.write_line(line)
        ok = sum(1 for f in self.rows if f.seen == f.expected)
        tr.write_line(f"runs: {len(self.rows)}, all evaluations kept in {ok}; "
                      f"{sum(f.seconds for f in self.rows):.1f} s of runs")


_FIGURES = Figures()


def figures(config: pytest.Config) -> Figures:
    """The session's figures, registered as a plugin once so pytest prints them at the end."""
    if not config.pluginmanager.is_registered(_FIGURES):
        config.pluginmanager.register(_FIGURES, "ajet-conformance-figures")
    return _FIGURES


# ----------------------------------------------------------------------------- helpers
def write_yaml(codebase: Path, name: str, base: str = "minimal.yaml", *, conformance: dict[str, Any] | None = None,
               **trainer: Any) -> Path:
    """A copy of a tier YAML with `ajet.trainer_common.<key>` (and `conformance.<key>` knobs) replaced."""
    data = yaml.safe_load((codebase / base).read_text())
    data["ajet"]["trainer_common"].update(trainer)
    data.setdefault("conformance", {}).update(conformance or {})
    path = codebase / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def blueprint(tmp_path: Path, codebase: Path, conf: Path, *, max_time: str = "10 minutes",
              purpose: str = "Conformance: the real agentjet 0.0.1 launcher under ajet-runner.",
              command: str | None = None, name: str = "blueprint.md") -> tuple[Path, Path]:
    """A blueprint (`## [tag]` layout) that runs the real launcher from `codebase`; (its path, its result dir)."""
    results = tmp_path / f"results-{Path(name).stem}"
    launch = command or f"python -m ajet.launcher --conf {conf} --backbone verl"
    path = tmp_path / name
    path.write_text(f"""## [exp_purpose]
{purpose}

## [exp_codebase_dir]
{codebase}

## [exp_venv_exe]
{harness.venv_python()}

## [exp_yaml_path]
{conf}

## [exp_launch_command]
```bash
{launch}
```

## [exp_result_dir]
{results}

## [exp_max_time]
{max_time}
""", encoding="utf-8")
    return path, results


def runner_env(env: dict[str, str], tmux_socket: str, **extra: str) -> dict[str, str]:
    """The harness env (stand-ins first on PATH, sandbox token) plus our runner's: private tmux, embedded Redis."""
    out = {k: v for k, v in env.items() if k != "REDIS_URL"}
    out.update({"AJET_RUNNER_TMUX_SOCKET": tmux_socket, "AJET_RUNNER_POLL_INTERVAL": "0.2",
                "AJET_RUNNER_STOP_GRACE_SECONDS": "10", "COLUMNS": "200"})
    out.update(extra)
    return out


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    results: Path
    seconds: float

    @property
    def flag(self) -> dict[str, Any]:
        return json.loads((self.results / "finish.flag").read_text())

    @property
    def doc(self) -> dict[str, Any]:
        return json.loads((self.results / "results.json").read_text())

    @property
    def report(self) -> str:
        return (self.results / "experiment_report.md").read_text()

    def log_lines(self) -> list[str]:
        return harness.console_lines((self.results / "logs" / "attempt-1.log").read_text(errors="replace"))


def run_blueprint(path: Path, results: Path, env: dict[str, str], timeout: float = 420) -> Run:
    start = time.monotonic()
    proc = subprocess.run([*CLI, "run", str(path)], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)
    return Run(proc, results, time.monotonic() - start)


def steps_of(pattern: re.Pattern[str], lines: list[str]) -> list[int]:
    return sorted({int(m.group(1)) for line in lines if (m := pattern.match(line))})


def results_cli(path: Path, env: dict[str, str]) -> dict[str, Any]:
    out = subprocess.run([*CLI, "results", str(path), "--json"], env=env, capture_output=True, text=True,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


# ----------------------------------------------------------------------------- (a)
def test_forty_steps_test_freq_1_every_evaluation_everywhere(codebase, make_env, tmux_socket, tmp_path,
                                                             pytestconfig) -> None:
    conf = write_yaml(codebase, "forty.yaml", total_epochs=20, test_freq=1, save_freq=10)  # 2 steps an epoch
    path, results = blueprint(tmp_path, codebase, conf,
                              purpose="Conformance: 40 steps, test_freq 1, verl validation rows at every step.")
    env = runner_env(make_env(), tmux_socket)
    run = run_blueprint(path, results, env)
    assert run.proc.returncode == 0, run.proc.stdout[-3000:] + run.proc.stderr[-3000:]
    assert run.flag["outcome"] == "completed"

    lines = run.log_lines()
    printed = steps_of(VALIDATION_ROW, lines)
    assert printed == list(range(41))  # what the real trainer printed: step 0 and every step
    assert steps_of(TRAINING_ROW, lines) == list(range(1, 41))

    doc = run.doc
    kept = [e["step"] for e in doc["evaluations"]]
    figures(pytestconfig).rows.append(Figure("40 steps, test_freq 1 (completed)", run.flag["outcome"], len(kept),
                                             len(printed), doc["train_steps"], run.seconds))
    assert kept == printed and doc["evaluation_count"] == 41
    assert doc["train_steps"] == 40
    assert doc["final"]["step"] == 40 and doc["final"]["metrics"]["task_pass_rate@1"] == doc["final"]["metrics"][
        "TGC@1"]
    assert doc["files"]["plot"] == "reward_plot.png" and (results / "reward_plot.png").stat().st_size > 10_000

    report = run.report
    assert re.search(r"^\| Evaluations \| 41 \|$", report, re.M)
    assert re.search(r"^\| Training steps logged \| 40 \|$", report, re.M)
    table = report.split("## Evaluations", 1)[1].split("## Best and final values", 1)[0]
    assert [int(s) for s in re.findall(r"^\| (\d+) \| ", table, re.M)] == list(range(41))

    live = sorted({int(s) for s in re.findall(r"evaluation at step (\d+):", run.proc.stdout)})
    assert live == list(range(41))  # every evaluation was an event while the run was watched

    # `ajet-runner results` says what the report says (its JSON contract: step, dataset, metrics; results.json
    # also names each evaluation's attempt): from results.json ...
    reported = [{k: e[k] for k in ("step", "dataset", "metrics")} for e in doc["evaluations"]]
    shown = results_cli(results, env)
    assert shown["evaluations"] == reported and shown["final"] == doc["final"]
    assert shown["best"] == doc["best"]
    # ... and, without it, from the same sources in the same order (the attempt's log here).
    bare = tmp_path / "without-results-json"
    shutil.copytree(results, bare)
    (bare / "results.json").unlink()
    again = results_cli(bare, env)
    assert again["evaluations"] == reported
    assert again["final"] == doc["final"] and again["best"] == doc["best"]


# ----------------------------------------------------------------------------- (b)
def test_a_plateau_of_the_real_trainer_stops_early_stopped(codebase, make_env, tmux_socket, tmp_path,
                                                           pytestconfig) -> None:
    # The stand-in's plateau at success probability 1.0: every validation after step 4 prints TGC@1 = 1.0
    # exactly, so the default rule (4 evaluations within 0.005) applies; 20 steps of 2 s outlast it.
    conf = write_yaml(codebase, "flat.yaml", base="plateau.yaml", total_epochs=10,
                      conformance={"curve_end": 1.0, "plateau_at": 4, "step_seconds": 2})
    path, results = blueprint(tmp_path, codebase, conf, max_time="3 minutes",
                              purpose="Conformance: the real trainer's validation reward stops moving.")
    env = runner_env(make_env(), tmux_socket, AJET_RUNNER_PLATEAU_AFTER_FRACTION="0.2")
    run = run_blueprint(path, results, env)
    lines = run.log_lines()
    printed = steps_of(VALIDATION_ROW, lines)
    doc = run.doc
    kept = [e["step"] for e in doc["evaluations"]]
    figures(pytestconfig).rows.append(Figure("plateau at step 4 of 20 (early stop)", run.flag["outcome"],
                                             len(kept), len(printed), doc["train_steps"], run.seconds))
    assert run.flag["outcome"] == "early_stopped", run.proc.stdout[-3000:]
    assert run.proc.returncode == 0, run.proc.stderr[-2000:]
    assert doc["history"][-1]["trigger"] == "plateau", doc["history"]
    assert kept == printed and 4 + 4 <= len(kept) < 21  # stopped after the plateau, before the 20th step
    last = [e["metrics"]["task_pass_rate@1"] for e in doc["evaluations"][-4:]]
    assert last == [1.0] * 4
    assert not any("Final validation metrics" in line for line in lines)  # it did not run to its end
