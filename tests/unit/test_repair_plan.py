"""Where a plan comes from: catalogue first, then the site hook, then the adviser — each only when the one
before it had nothing. The hook is a real command; the adviser is any callable with its contract."""

from __future__ import annotations

import json
import shlex
import sys

from ajet_runner.statemachine.failures.diagnose import diagnose_text
from ajet_runner.statemachine.models import Blueprint, RepairAction
from ajet_runner.workers.repair.plan import plan_repair

BP = Blueprint(exp_purpose="p", exp_codebase_dir="/c", exp_yaml_path="x.yaml")
ADVICE = [RepairAction(kind="set_yaml", key="ajet.rollout.tensor_model_parallel_size", value=4)]
UNKNOWN = "Traceback (most recent call last):\n  File \"x\", line 1\nValueError: something new\n"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB\n"
MODEL_MISSING = "AssertionError: Model path /data/m does not exist.\n"


def hook(answer: dict) -> str:
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(f'print({json.dumps(json.dumps(answer))})')}"


class Adviser:
    def __init__(self, answer: tuple[list[RepairAction], str] | None) -> None:
        self.answer = answer
        self.asked = 0

    def __call__(self) -> tuple[list[RepairAction], str] | None:
        self.asked += 1
        return self.answer


def plan(log: str, *, hook_cmd: str = "", adviser: Adviser | None = None) -> tuple[list[RepairAction], str, str]:
    cause = diagnose_text(log).cause
    pending = {"cause": cause.model_dump() if cause else None, "reason": "exit 1", "log_tail": []}
    return plan_repair(cause, pending, hook=hook_cmd, bp=BP, attempt=1, config_path="/c/x.yaml", advise=adviser)


def test_catalogue_plans_and_known_unrepairable_causes_never_reach_the_adviser() -> None:
    adviser = Adviser((ADVICE, "advised"))
    actions, source, _ = plan(OOM, adviser=adviser)
    assert source == "catalogue" and actions
    actions, source, why = plan(MODEL_MISSING, adviser=adviser)
    assert (actions, source) == ([], "catalogue") and "not repairable" in why
    assert adviser.asked == 0


def test_adviser_is_next_after_the_hook_said_nothing() -> None:
    adviser = Adviser((ADVICE, "advised by m"))
    assert plan(UNKNOWN, adviser=adviser) == (ADVICE, "adviser", "advised by m")
    assert plan(UNKNOWN, hook_cmd=hook({"actions": [], "explanation": "no idea"}), adviser=adviser)[1] == "adviser"
    assert adviser.asked == 2
    hooked = [{"kind": "set_env", "key": "NCCL_P2P_DISABLE", "value": "1"}]
    actions, source, _ = plan(UNKNOWN, hook_cmd=hook({"actions": hooked, "explanation": "p2p"}), adviser=adviser)
    assert source == "hook" and actions[0].key == "NCCL_P2P_DISABLE" and adviser.asked == 2


def test_an_adviser_not_asked_leaves_the_old_answer() -> None:
    off = Adviser(None)
    assert plan(UNKNOWN, adviser=off) == ([], "none", "exit 1")
    actions, source, why = plan(UNKNOWN, hook_cmd=hook({"actions": [], "explanation": "no idea"}), adviser=off)
    assert (actions, source, why) == ([], "hook", "no idea") and off.asked == 2
    assert plan(UNKNOWN) == ([], "none", "exit 1")
