"""Turn a sample blueprint template into a runnable blueprint over a private sim codebase.

The simulated AgentJet is copied fresh for every materialisation, so preflight edits,
checkpoints and failure markers of one demo or test never leak into the repository or into
another run.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

SIM_DIRNAME = "agentjet_sim"
BLUEPRINTS_DIRNAME = "blueprints"
# Run-time state the simulator writes into its codebase; never copied.
_RUNTIME_DIRS = ("__pycache__", ".sim_state", "checkpoints", "saved_checkpoints", "saved_experiments",
                 "saved_val_result", ".venv")


def examples_dir() -> Path:
    """The samples: the package `ajet_runner.examples` (the checkout's `examples/`, or a wheel's copy),
    so it works from any cwd."""
    import ajet_runner.examples

    path = Path(ajet_runner.examples.__file__).resolve().parent
    if not ((path / SIM_DIRNAME).is_dir() and (path / BLUEPRINTS_DIRNAME).is_dir()):
        raise FileNotFoundError(f"examples not found at {path} (expected {SIM_DIRNAME}/ and {BLUEPRINTS_DIRNAME}/): "
                                "reinstall ajet-runner")
    return path


def list_templates() -> list[str]:
    """Names of the sample blueprints (file stems), e.g. "demo", "oom_first_attempt"."""
    return sorted(p.stem for p in (examples_dir() / BLUEPRINTS_DIRNAME).glob("*.md"))


def _template_path(template: str | Path) -> Path:
    candidate = Path(template)
    if candidate.is_file():
        return candidate
    name = candidate.name if candidate.suffix == ".md" else f"{candidate.name}.md"
    path = examples_dir() / BLUEPRINTS_DIRNAME / name
    if not path.is_file():
        raise FileNotFoundError(f"no blueprint template {template!r}; known: {', '.join(list_templates())}")
    return path


def materialize(template: str | Path, workdir: Path, python: str | None = None, swarm_port: int = 10086) -> Path:
    """Write `workdir/blueprint.md` from a template, with a fresh sim codebase beside it.

    `template` is a name from `list_templates()` or a path to a template file. Placeholders:
    {{CODEBASE}} -> workdir/codebase, {{PYTHON}} -> `python` (default: this interpreter),
    {{RESULT_DIR}} -> workdir/results, {{SWARM_PORT}} -> `swarm_port` (swarm templates).
    Returns the blueprint's path.
    """
    source = _template_path(template)
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    codebase = workdir / "codebase"
    if codebase.exists():
        shutil.rmtree(codebase)
    shutil.copytree(examples_dir() / SIM_DIRNAME, codebase, ignore=shutil.ignore_patterns(*_RUNTIME_DIRS))
    text = source.read_text(encoding="utf-8")
    for key, value in (
        ("{{CODEBASE}}", str(codebase)),
        ("{{PYTHON}}", python or sys.executable),
        ("{{RESULT_DIR}}", str(workdir / "results")),
        ("{{SWARM_PORT}}", str(swarm_port)),
    ):
        text = text.replace(key, value)
    blueprint = workdir / "blueprint.md"
    blueprint.write_text(text, encoding="utf-8")
    return blueprint
