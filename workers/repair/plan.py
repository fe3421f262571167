"""Where a repair plan comes from: the catalogue for a known cause, else the site's repair hook, else the
LLM adviser (workers/repair/adviser.py) when one is configured."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ajet_runner.statemachine.failures.signatures import signature
from ajet_runner.statemachine.models import Blueprint, Finding, RepairAction
from ajet_runner.workers.repair.site_hook import ask_hook


def is_generic(signature_id: str) -> bool:
    """A catch-all finding (a bare traceback, an exit status): the catalogue does not know the cause."""
    try:
        return signature(signature_id).generic
    except KeyError:
        return True


Advise = Callable[[], tuple[list[RepairAction], str] | None]


def plan_repair(cause: Finding | None, pending: dict[str, Any], *, hook: str, bp: Blueprint, attempt: int,
                config_path: str, advise: Advise | None = None) -> tuple[list[RepairAction], str, str]:
    """(actions, source, why). A known cause the runner cannot fix gets no plan, not even from the hook.

    The adviser is asked only when the catalogue has no plan and the hook (if any) proposed nothing;
    `advise()` returns None when it was not asked (off, asks used up, budget spent).
    """
    known = _from_catalogue(cause)
    if known is not None:
        return known
    hooked = ask_hook(hook, {
        "blueprint": bp.public(), "diagnosis": pending.get("cause"), "reason": pending.get("reason"),
        "log_tail": pending.get("log_tail", []), "attempt": attempt, "config": config_path,
    }) if hook else None
    if hooked is not None and (hooked[0] or advise is None):
        return hooked[0], "hook", hooked[1]
    advice = advise() if advise is not None else None
    if advice is not None:
        return advice[0], "adviser", advice[1]
    if hooked is not None:
        return [], "hook", hooked[1]
    return [], "none", str(pending.get("reason") or "unknown failure")


def _from_catalogue(cause: Finding | None) -> tuple[list[RepairAction], str, str] | None:
    """The catalogue's verdict on a known cause: its repair, or none at all for a cause it names as not
    repairable (not even the hook is asked); None for a cause it leaves to the hook and the adviser."""
    if cause is None:
        return None
    if not is_generic(cause.signature) and not cause.repairable:
        return [], "catalogue", f"{cause.explanation} (not repairable by the runner)"
    if cause.repairable and cause.repair:
        return list(cause.repair), "catalogue", cause.explanation
    return None
