"""The experiment lifecycle as an explicit `transitions` machine.

The machine's definition lives here, in code; only the state string, the outcome, counters
and history are persisted (see `to_dict`/`from_dict`), so a restarted worker rebuilds the same
machine at the saved state without re-running any `on_enter` callback.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transitions import EventData


class Name(str, Enum):
    """A str-valued enum whose str() and format() are its value (like 3.11's StrEnum), so an f-string, a
    log line or a Redis field shows `cancel`, never `Trigger.cancel`."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class State(str, Enum):
    queued = "queued"
    launching = "launching"
    running = "running"
    failing = "failing"
    repairing = "repairing"
    collecting = "collecting"
    finished = "finished"


class Outcome(str, Enum):
    completed = "completed"
    early_stopped = "early_stopped"
    timed_out = "timed_out"
    failed = "failed"
    cancelled = "cancelled"


class Trigger(Name):
    """The lifecycle's triggers (what `Lifecycle.fire` takes; stored as the value in the history)."""

    start = "start"
    reject = "reject"
    launched = "launched"
    completed = "completed"
    anomaly = "anomaly"
    time_up = "time_up"
    plateau = "plateau"
    cancel = "cancel"
    repair = "repair"
    give_up = "give_up"
    relaunch = "relaunch"
    collected = "collected"
    write_failed = "write_failed"


class EventType(Name):
    """Every `type` an experiment's event stream carries (the values are on the wire: stored streams, the
    API's JSON and SSE `event:` names, webhooks' readers). store/events.py models each one's fields."""

    submitted = "submitted"  # the record was created (its first transition: to queued)
    transition = "transition"  # the lifecycle moved (from, to, trigger, reason, attempt)
    adoption = "adoption"  # a node's supervisor queued a drive job for a run whose driver's lease expired
    adopted = "adopted"  # a driver took over such a run (the lease is its own now)
    requeued = "requeued"  # a queued run's job died before any worker claimed it: queued again
    node_absent = "node_absent"  # the node a queued run is pinned to has not been seen for a while
    cleanup = "cleanup"  # processes a stop or relaunch killed
    result_write_failed = "result_write_failed"
    gpu_check = "gpu_check"  # what the runner's own GPU check before launch saw
    scan_resumed = "scan_resumed"  # an adopted run's log scan goes on from a checkpoint
    scan_caught_up = "scan_caught_up"
    evaluation = "evaluation"  # a validation row of the log (step, dataset, metrics)
    progress = "progress"
    warning = "warning"
    unscanned = "unscanned"  # a byte range of the log that was never scanned
    gang = "gang"  # multi-node: the ranks' news
    swarm_server = "swarm_server"
    adviser = "adviser"  # the LLM adviser was asked, answered, ...
    stage_report = "stage_report"
    stage_report_failed = "stage_report_failed"
    webhook_delivered = "webhook_delivered"
    webhook_gave_up = "webhook_gave_up"
    webhook_failed = "webhook_failed"
    host = "host"  # the ssh host of a run: unreachable, reconnected, or served by no worker (docs/executors.md)
    info = "info"  # what an event without a type reads as


ACTIVE_STATES = (State.launching, State.running, State.failing, State.repairing, State.collecting)
# Outcomes a user counts as success (the `run` command exits 0 for them).
SUCCESS_OUTCOMES = (Outcome.completed, Outcome.early_stopped)
# The same as plain strings, the one definition every layer compares stored values with.
FINISHED = State.finished.value
SUCCEEDED = tuple(o.value for o in SUCCESS_OUTCOMES)
ACTIVE_STATE_NAMES = frozenset(s.value for s in ACTIVE_STATES)

# The trigger that leads to `collecting` decides the outcome.
OUTCOME_OF_TRIGGER: dict[str, Outcome] = {
    Trigger.completed: Outcome.completed,
    Trigger.time_up: Outcome.timed_out,
    Trigger.plateau: Outcome.early_stopped,
    Trigger.cancel: Outcome.cancelled,
    Trigger.give_up: Outcome.failed,
    Trigger.write_failed: Outcome.failed,  # the result files (finish.flag) could not be written: never "completed"
}

_S, _T = State, Trigger
TRANSITIONS: list[dict[str, Any]] = [
    {"trigger": _T.start, "source": _S.queued, "dest": _S.launching},
    {"trigger": _T.reject, "source": [_S.queued, _S.launching], "dest": _S.failing},
    {"trigger": _T.launched, "source": _S.launching, "dest": _S.running},
    {"trigger": _T.completed, "source": _S.running, "dest": _S.collecting},
    {"trigger": _T.anomaly, "source": [_S.launching, _S.running], "dest": _S.failing},
    {"trigger": _T.time_up, "source": [_S.launching, _S.running, _S.failing, _S.repairing],
     "dest": _S.collecting},
    {"trigger": _T.plateau, "source": _S.running, "dest": _S.collecting},
    {"trigger": _T.cancel, "source": [_S.queued, _S.launching, _S.running, _S.failing, _S.repairing],
     "dest": _S.collecting},
    {"trigger": _T.repair, "source": _S.failing, "dest": _S.repairing, "conditions": "repair_allowed"},
    {"trigger": _T.give_up, "source": _S.failing, "dest": _S.collecting},
    {"trigger": _T.relaunch, "source": _S.repairing, "dest": _S.launching, "after": "_next_attempt"},
    {"trigger": _T.collected, "source": _S.collecting, "dest": _S.finished},
    {"trigger": _T.write_failed, "source": _S.collecting, "dest": _S.finished},
]
TRIGGERS = tuple(t.value for t in Trigger)


class TransitionRefused(RuntimeError):
    """A trigger that is not valid in the current state, or whose guard said no."""


@dataclass
class RepairBudget:
    total: int = 3
    per_signature: int = 2


def _known_state(data: dict[str, Any]) -> str:
    """A stored lifecycle's state (queued when absent); ValueError for a state this version does not know."""
    state = str(data.get("state") or State.queued.value)
    if state not in {s.value for s in State}:
        raise ValueError(f"unknown lifecycle state {state!r}")
    return state


@dataclass
class Lifecycle:
    """One experiment's position in the lifecycle, plus what the guards need to decide."""

    id: str
    state: str = State.queued.value
    outcome: str = ""
    reason: str = ""
    attempt: int = 0
    repairs: dict[str, int] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    budget: RepairBudget = field(default_factory=RepairBudget)

    def __post_init__(self) -> None:
        # Imported here: the vocabulary above (states, outcomes, triggers) is read by the CLI's light commands,
        # which build no machine.
        from transitions import Machine

        self._machine = Machine(
            model=self,
            states=[s.value for s in State],
            transitions=[_plain(t) for t in TRANSITIONS],
            initial=self.state,
            auto_transitions=False,
            send_event=True,
            after_state_change="_record",
            model_attribute="state",
        )

    # -- guards and callbacks ------------------------------------------------------------
    def repair_allowed(self, event: EventData) -> bool:
        """The repair budget: a total per experiment and a smaller one per signature."""
        signature = str(event.kwargs.get("signature", ""))
        if sum(self.repairs.values()) >= self.budget.total:
            return False
        return self.repairs.get(signature, 0) < self.budget.per_signature

    def _next_attempt(self, event: EventData) -> None:
        self.attempt += 1

    def _record(self, event: EventData) -> None:
        trigger = event.event.name
        if trigger in OUTCOME_OF_TRIGGER:
            self.outcome = OUTCOME_OF_TRIGGER[trigger].value
        if trigger == Trigger.repair:
            signature = str(event.kwargs.get("signature", ""))
            self.repairs[signature] = self.repairs.get(signature, 0) + 1
        if trigger == Trigger.start and self.attempt == 0:
            self.attempt = 1
        self.reason = str(event.kwargs.get("reason", "")) or self.reason
        transition = event.transition
        assert transition is not None  # after_state_change: the transition was made
        self.history.append(
            {
                "at": float(event.kwargs.get("at") or time.time()),
                "from": transition.source,
                "to": transition.dest,
                "trigger": trigger,
                "reason": str(event.kwargs.get("reason", "")),
                "attempt": self.attempt,
            }
        )

    # -- the one entry point adapters use -------------------------------------------------
    def fire(
        self, trigger: Trigger | str, *, reason: str = "", at: float | None = None, **detail: Any
    ) -> dict[str, Any]:
        """Apply `trigger`; return the history entry it made. Raises TransitionRefused."""
        trigger = str(trigger)
        if trigger not in TRIGGERS:
            raise TransitionRefused(f"unknown trigger {trigger!r}")
        from transitions import MachineError

        before = len(self.history)  # every transition appends one entry (_record)
        try:
            self.trigger(trigger, reason=reason, at=at, **detail)  # type: ignore[attr-defined]  # added by transitions
        except MachineError as exc:
            raise TransitionRefused(f"{trigger!r} is not allowed from state {self.state!r}") from exc
        if len(self.history) == before:
            raise TransitionRefused(f"{trigger!r} refused in state {self.state!r}: guard said no")
        return self.history[-1]

    def can(self, trigger: Trigger | str, **detail: Any) -> bool:
        """Whether `trigger` is valid now (guards included)."""
        trigger = str(trigger)
        if trigger not in TRIGGERS:
            return False
        return bool(self.may_trigger(trigger, **detail))  # type: ignore[attr-defined]  # added by transitions

    @property
    def finished(self) -> bool:
        return self.state == State.finished.value

    # -- persistence -----------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "outcome": self.outcome,
            "reason": self.reason,
            "attempt": self.attempt,
            "repairs": dict(self.repairs),
            "history": list(self.history),
            "budget": {"total": self.budget.total, "per_signature": self.budget.per_signature},
        }

    @staticmethod
    def initial_dict(exp_id: str) -> dict[str, Any]:
        """`Lifecycle(id=exp_id).to_dict()` without building the machine (a submission stores only this;
        building the `transitions` machine costs more than the rest of the record)."""
        budget = RepairBudget()
        return {"id": exp_id, "state": State.queued.value, "outcome": "", "reason": "", "attempt": 0, "repairs": {},
                "history": [], "budget": {"total": budget.total, "per_signature": budget.per_signature}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Lifecycle:
        budget = data.get("budget") or {}
        return cls(
            id=str(data["id"]),
            state=_known_state(data),
            outcome=str(data.get("outcome") or ""),
            reason=str(data.get("reason") or ""),
            attempt=int(data.get("attempt") or 0),
            repairs={str(k): int(v) for k, v in (data.get("repairs") or {}).items()},
            history=list(data.get("history") or []),
            budget=RepairBudget(int(budget.get("total", 3)), int(budget.get("per_signature", 2))),
        )


def _plain(transition: dict[str, Any]) -> dict[str, Any]:
    """Enum members → their string values, as `transitions` compares states by name."""

    def value(x: Any) -> Any:
        if isinstance(x, list):
            return [value(i) for i in x]
        return x.value if isinstance(x, Enum) else x

    return {k: value(v) for k, v in transition.items()}
