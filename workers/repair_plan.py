"""Where a repair plan comes from: the catalogue for a known cause, else the site's repair hook."""

from __future__ import annotations

from typing import Any

from statemachine.models import Blueprint, Finding, RepairAction
from statemachine.signatures import signature
from workers.repair_hook import ask_hook


def is_generic(signature_id: str) -> bool:
    """A catch-all finding (a bare traceback, an exit status): the catalogue does not know the cause."""
    try:
        return signature(signature_id).generic
    except KeyError:
        return True


def plan_repair(cause: Finding | None, pending: dict[str, Any], *, hook: str, bp: Blueprint, attempt: int,
                config_path: str) -> tuple[list[RepairAction], str, str]:
    """(actions, source, why). A known cause the runner cannot fix gets no plan, not even from the hook."""
    if cause is not None and not is_generic(cause.signature) and not cause.repairable:
        return [], "catalogue", f"{cause.explanation} (not repairable by the runner)"
    if cause is not None and cause.repairable and cause.repair:
        return list(cause.repair), "catalogue", cause.explanation
    if hook:
        actions, why = ask_hook(hook, {
            "blueprint": bp.public(), "diagnosis": pending.get("cause"), "reason": pending.get("reason"),
            "log_tail": pending.get("log_tail", []), "attempt": attempt, "config": config_path,
        })
        return actions, "hook", why
    return [], "none", str(pending.get("reason") or "unknown failure")
