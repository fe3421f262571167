"""An optional site command that proposes a repair plan for failures the catalogue does not know.

It receives JSON on stdin — {"blueprint", "diagnosis", "log_tail", "attempt", "config"} — and may
answer JSON {"actions": [RepairAction...], "explanation": "..."} on stdout. Anything else (a
non-zero exit, a timeout, bad JSON, invalid actions) means "no plan", recorded as such.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from typing import Any

from pydantic import ValidationError

from ajet_runner.statemachine.models import RepairAction


def ask_hook(command: str, payload: dict[str, Any], timeout: float = 300.0
             ) -> tuple[list[RepairAction], str]:
    """Run the hook; returns (actions, explanation or the reason there is no plan)."""
    try:
        proc = subprocess.run(shlex.split(command), input=json.dumps(payload, default=str), text=True,
                              capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [], f"repair hook failed to run: {exc}"
    if proc.returncode != 0:
        return [], f"repair hook exited with {proc.returncode}: {proc.stderr.strip()[-500:]}"
    try:
        answer = json.loads(proc.stdout or "{}")
        actions = [RepairAction.model_validate(a) for a in answer.get("actions", [])]
    except (json.JSONDecodeError, AttributeError, ValidationError) as exc:
        return [], f"repair hook answered something that is not a plan: {exc}"
    return actions, str(answer.get("explanation", "")) or "plan from the repair hook"
