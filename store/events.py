"""What an experiment's event stream carries, typed: one model per `EventType`, one union on `type`.

The one definition of an event's shape: `EventLog.publish`/`Records.transition` (and the journal, before it
queues a write) check what is written against it (`checked`), the API's event endpoints document their
answer with it (every type in the OpenAPI schema; the events themselves are sent as stored), the console
and the CLI read events through it, and the Python client returns these models.

Reading is lenient (a stream holds what older versions wrote): fields not named here are kept
(`extra="allow"`), and a type this version does not know reads as `OtherEvent`. Writing is strict: a type
that is not an `EventType` member is refused, so no new bare string can enter a stream unnoticed.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter, ValidationError

from ajet_runner.statemachine.lifecycle import EventType

_KNOWN = frozenset(t.value for t in EventType)
OTHER = "other"  # the union's tag for a type this version does not know


class EventBase(BaseModel):
    """Common to every event; the model also reads like the dict it came from (`e["to"]`, `e.get("step")`)."""

    # Validators are built on first use: the CLI imports these models on every start (64 ms built eagerly).
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    type: str = EventType.info.value
    event_id: str = ""  # the Redis stream entry id (set when read)
    at: float | None = None  # when it was published (server clock)
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (wire names, e.g. `from`), every field including unknown ones."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def full(self) -> dict[str, Any]:
        """Every field, defaults included (what the API documents)."""
        return self.model_dump(mode="json", by_alias=True)

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)

    def __getitem__(self, key: str) -> Any:
        data = self.to_dict()
        if key not in data:
            raise KeyError(key)
        return data[key]

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self.to_dict()

    def keys(self) -> list[str]:
        return list(self.to_dict())


class SubmittedEvent(EventBase):
    type: Literal[EventType.submitted] = EventType.submitted
    purpose: str = ""


class TransitionEvent(EventBase):
    type: Literal[EventType.transition] = EventType.transition
    from_: str = Field("", alias="from")
    to: str = ""
    trigger: str = ""
    reason: str = ""
    attempt: int = 0


class AdoptionEvent(EventBase):
    """A node's supervisor queued a drive job for a run whose driver's lease had expired."""

    type: Literal[EventType.adoption] = EventType.adoption
    node: str = ""


class AdoptedEvent(EventBase):
    """A driver took such a run over."""

    type: Literal[EventType.adopted] = EventType.adopted
    owner: str = ""
    state: str = ""


class RequeuedEvent(EventBase):
    type: Literal[EventType.requeued] = EventType.requeued
    job: str = ""
    status: str = ""


class NodeAbsentEvent(EventBase):
    type: Literal[EventType.node_absent] = EventType.node_absent
    node: str = ""
    absent_seconds: float = 0.0


class CleanupEvent(EventBase):
    type: Literal[EventType.cleanup] = EventType.cleanup
    killed_pids: list[int] = []


class ResultWriteFailedEvent(EventBase):
    type: Literal[EventType.result_write_failed] = EventType.result_write_failed
    errno: int | str | None = None
    path: str = ""


class GpuCheckEvent(EventBase):
    type: Literal[EventType.gpu_check] = EventType.gpu_check
    gpus: list[int] | None = None


class ScanResumedEvent(EventBase):
    type: Literal[EventType.scan_resumed] = EventType.scan_resumed
    offset: int = 0
    log_bytes: int | None = None


class ScanCaughtUpEvent(EventBase):
    type: Literal[EventType.scan_caught_up] = EventType.scan_caught_up
    from_: int | None = Field(None, alias="from")
    to: int | None = None


class EvaluationEvent(EventBase):
    type: Literal[EventType.evaluation] = EventType.evaluation
    step: int | None = None
    dataset: str = ""
    metrics: dict[str, Any] = {}


class ProgressEvent(EventBase):
    type: Literal[EventType.progress] = EventType.progress
    elapsed: float = 0.0
    max_seconds: float | None = None


class WarningEvent(EventBase):
    type: Literal[EventType.warning] = EventType.warning


class UnscannedEvent(EventBase):
    type: Literal[EventType.unscanned] = EventType.unscanned
    attempt: int = 0
    start: int = 0
    end: int = 0
    bytes: int = 0
    reason: str = ""


class GangEvent(EventBase):
    type: Literal[EventType.gang] = EventType.gang


class SwarmServerEvent(EventBase):
    type: Literal[EventType.swarm_server] = EventType.swarm_server


class AdviserEvent(EventBase):
    type: Literal[EventType.adviser] = EventType.adviser
    status: str = ""  # asking | answered | cancelled | not asked
    model: str = ""


class StageReportEvent(EventBase):
    type: Literal[EventType.stage_report] = EventType.stage_report
    stage: str = ""
    path: str = ""


class StageReportFailedEvent(EventBase):
    type: Literal[EventType.stage_report_failed] = EventType.stage_report_failed
    stage: str = ""
    dir: str = ""
    error: str = ""


class WebhookDeliveredEvent(EventBase):
    type: Literal[EventType.webhook_delivered] = EventType.webhook_delivered
    status: int | None = None


class WebhookGaveUpEvent(EventBase):
    type: Literal[EventType.webhook_gave_up] = EventType.webhook_gave_up
    error: str = ""


class WebhookFailedEvent(EventBase):
    type: Literal[EventType.webhook_failed] = EventType.webhook_failed
    error: str = ""
    retry_in: float | None = None


class HostEvent(EventBase):
    type: Literal[EventType.host] = EventType.host
    host: str = ""
    state: str = ""  # unreachable | reconnected | unserved


class InfoEvent(EventBase):
    type: Literal[EventType.info] = EventType.info


class OtherEvent(EventBase):
    """A type this version does not know (a newer writer): read as it is, never written by this one."""


MODELS: dict[EventType, type[EventBase]] = {
    EventType.submitted: SubmittedEvent, EventType.transition: TransitionEvent, EventType.adoption: AdoptionEvent,
    EventType.adopted: AdoptedEvent, EventType.requeued: RequeuedEvent, EventType.node_absent: NodeAbsentEvent,
    EventType.cleanup: CleanupEvent, EventType.result_write_failed: ResultWriteFailedEvent,
    EventType.gpu_check: GpuCheckEvent, EventType.scan_resumed: ScanResumedEvent,
    EventType.scan_caught_up: ScanCaughtUpEvent, EventType.evaluation: EvaluationEvent,
    EventType.progress: ProgressEvent, EventType.warning: WarningEvent, EventType.unscanned: UnscannedEvent,
    EventType.gang: GangEvent, EventType.swarm_server: SwarmServerEvent, EventType.adviser: AdviserEvent,
    EventType.stage_report: StageReportEvent, EventType.stage_report_failed: StageReportFailedEvent,
    EventType.webhook_delivered: WebhookDeliveredEvent, EventType.webhook_gave_up: WebhookGaveUpEvent,
    EventType.webhook_failed: WebhookFailedEvent, EventType.host: HostEvent, EventType.info: InfoEvent,
}


def _tag(value: Any) -> str:
    if isinstance(value, OtherEvent):
        return OTHER
    kind = value.get("type") if isinstance(value, Mapping) else getattr(value, "type", None)
    kind = str(kind if kind is not None else EventType.info)
    return kind if kind in _KNOWN else OTHER


Event = Annotated[
    Annotated[SubmittedEvent, Tag(EventType.submitted.value)]
    | Annotated[TransitionEvent, Tag(EventType.transition.value)]
    | Annotated[AdoptionEvent, Tag(EventType.adoption.value)]
    | Annotated[AdoptedEvent, Tag(EventType.adopted.value)]
    | Annotated[RequeuedEvent, Tag(EventType.requeued.value)]
    | Annotated[NodeAbsentEvent, Tag(EventType.node_absent.value)]
    | Annotated[CleanupEvent, Tag(EventType.cleanup.value)]
    | Annotated[ResultWriteFailedEvent, Tag(EventType.result_write_failed.value)]
    | Annotated[GpuCheckEvent, Tag(EventType.gpu_check.value)]
    | Annotated[ScanResumedEvent, Tag(EventType.scan_resumed.value)]
    | Annotated[ScanCaughtUpEvent, Tag(EventType.scan_caught_up.value)]
    | Annotated[EvaluationEvent, Tag(EventType.evaluation.value)]
    | Annotated[ProgressEvent, Tag(EventType.progress.value)]
    | Annotated[WarningEvent, Tag(EventType.warning.value)]
    | Annotated[UnscannedEvent, Tag(EventType.unscanned.value)]
    | Annotated[GangEvent, Tag(EventType.gang.value)]
    | Annotated[SwarmServerEvent, Tag(EventType.swarm_server.value)]
    | Annotated[AdviserEvent, Tag(EventType.adviser.value)]
    | Annotated[StageReportEvent, Tag(EventType.stage_report.value)]
    | Annotated[StageReportFailedEvent, Tag(EventType.stage_report_failed.value)]
    | Annotated[WebhookDeliveredEvent, Tag(EventType.webhook_delivered.value)]
    | Annotated[WebhookGaveUpEvent, Tag(EventType.webhook_gave_up.value)]
    | Annotated[WebhookFailedEvent, Tag(EventType.webhook_failed.value)]
    | Annotated[HostEvent, Tag(EventType.host.value)]
    | Annotated[InfoEvent, Tag(EventType.info.value)]
    | Annotated[OtherEvent, Tag(OTHER)],
    Discriminator(_tag),
]
"""Any event: the model of its `type` (an unknown type → OtherEvent)."""



@cache
def _adapter() -> TypeAdapter[Any]:
    return TypeAdapter(Event)


class EventRefused(ValueError):
    """An event this version may not write (a type that is not an EventType member, or a malformed field)."""


def parse_event(data: Mapping[str, Any]) -> EventBase:
    """An event as read from a stream or an API answer, as the model of its type; one whose fields do not
    fit its model (hand-written, an older writer) reads as OtherEvent, as it is, rather than failing."""
    try:
        event: EventBase = _adapter().validate_python(dict(data))
    except ValidationError:
        event = OtherEvent.model_validate(dict(data))
    return event


def checked(event: Mapping[str, Any] | EventBase, default: EventType = EventType.info) -> dict[str, Any]:
    """What a writer publishes, checked against its model; returns the dict to store, as written (plus the
    type when it had none): validation never changes what goes on the wire."""
    data = event.to_dict() if isinstance(event, EventBase) else dict(event)
    kind = str(data.get("type") or default)
    if kind not in _KNOWN:
        raise EventRefused(f"event type {kind!r} is not an EventType member")
    data["type"] = EventType(kind)
    try:
        MODELS[EventType(kind)].model_validate(data)
    except ValueError as exc:
        raise EventRefused(f"{kind} event: {exc}") from exc
    return data
