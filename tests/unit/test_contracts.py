"""One definition per contract: lifecycle triggers and event types are enum members wherever code fires or
emits them, every event type has its model (store/events.py), and the API, the console and the CLI know
each one. The values stay what they were on the wire."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from ajet_runner.cli.commands.client_commands import event_line
from ajet_runner.service.client.answers import EventPage
from ajet_runner.service.ui.streams import _message
from ajet_runner.statemachine.lifecycle import TRANSITIONS, EventType, Lifecycle, Trigger
from ajet_runner.store.events import MODELS, EventRefused, OtherEvent, TransitionEvent, checked, parse_event

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("statemachine", "store", "workers", "service", "cli", "resultdir", "logsetup")
# Calls whose first argument is a lifecycle trigger.
TRIGGER_CALLS = {"fire", "can", "Proposal", "Verdict", "_claim_and_fire"}
# Dicts carrying "type" that are not stream events (JSON schemas, ASGI messages, the webhook's body, SSE-only).
NOT_EVENTS = {"string", "object", "array", "boolean", "json_object", "http.response.start", "http.response.body",
              "http.request", "websocket.close", "experiment_finished", "stage_finished", "deleted", "end"}


def _files() -> list[Path]:
    return [p for top in PRODUCTION for p in (ROOT / top).rglob("*.py")]


def _is_member(node: ast.AST, enum: str) -> bool:
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == enum


def test_every_event_a_module_writes_names_its_type_by_an_enum_member() -> None:
    bare = []
    for path in _files():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Dict):
                continue
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "type" and value is not None:
                    if isinstance(value, ast.Constant) and value.value in NOT_EVENTS:
                        continue
                    if isinstance(value, ast.Constant | ast.JoinedStr) or (isinstance(value, ast.Attribute)
                                                                         and not _is_member(value, "EventType")):
                        bare.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(value)}")
    assert bare == []


def test_every_trigger_a_module_fires_is_a_trigger_member() -> None:
    bare = []
    for path in _files():
        if path.name == "lifecycle.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            index = 1 if name == "_claim_and_fire" else 0
            if name in TRIGGER_CALLS and len(node.args) > index and isinstance(node.args[index], ast.Constant):
                bare.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}({node.args[index].value!r})")
    assert bare == []


def test_the_scans_would_see_a_bare_string(tmp_path: Path) -> None:
    tree = ast.parse('d.fire("cancel")\npublish({"type": "progress"})\n')
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert any(isinstance(c.args[0], ast.Constant) for c in calls if getattr(c.func, "attr", "") == "fire")
    dicts = [n for n in ast.walk(tree) if isinstance(n, ast.Dict)]
    assert isinstance(dicts[0].values[0], ast.Constant)


def test_the_triggers_are_the_machines_and_keep_their_wire_values() -> None:
    assert {t["trigger"] for t in TRANSITIONS} == set(Trigger)
    assert [str(t) for t in Trigger] == [t.value for t in Trigger]
    assert f"{Trigger.give_up}" == "give_up" and json.dumps(EventType.adopted) == '"adopted"'
    lc = Lifecycle(id="x")
    entry = lc.fire(Trigger.start)
    assert entry["trigger"] == "start" and type(entry["trigger"]) is str
    assert lc.can("cancel") and lc.can(Trigger.cancel)


def test_every_event_type_has_its_model_and_round_trips() -> None:
    assert set(MODELS) == set(EventType)
    for kind, model in MODELS.items():
        event = parse_event({"type": kind.value, "at": 1.0, "message": "m", "extra": 1})
        assert type(event) is model, kind
        assert event.to_dict() == {"type": kind.value, "at": 1.0, "message": "m", "extra": 1}


def test_reading_is_lenient_writing_is_strict() -> None:
    assert isinstance(parse_event({"type": "from_a_newer_version", "x": 1}), OtherEvent)
    odd = parse_event({"type": "evaluation", "step": "not a number"})  # an older writer's shape: read as it is
    assert isinstance(odd, OtherEvent) and odd.to_dict() == {"type": "evaluation", "step": "not a number"}
    old = parse_event({"type": "transition", "from": "queued", "to": "launching", "trigger": "start"})
    assert isinstance(old, TransitionEvent) and old.from_ == "queued" and old["from"] == "queued"
    with pytest.raises(EventRefused):
        checked({"type": "not_a_member"})
    with pytest.raises(EventRefused):
        checked({"type": EventType.evaluation, "metrics": "not a map"})
    written = {"type": EventType.progress, "elapsed": 3.5, "whatever": [1]}
    assert checked(written) == written  # validation never changes what is stored


def test_the_api_console_and_cli_know_every_event_type() -> None:
    schema = json.dumps(EventPage.model_json_schema())
    from ajet_runner.service.api.schemas import EventPage as ApiPage

    api_schema = json.dumps(ApiPage.model_json_schema())
    for kind, model in MODELS.items():
        assert model.__name__ in api_schema and model.__name__ in schema, kind
        data = {"type": kind.value, "at": 0.0, "message": f"about {kind.value}",
                **({"from": "collecting", "to": "finished"} if kind == EventType.transition else {})}
        text, event = _message(b"1-0", {b"id": b"e1", b"type": kind.value.encode(), b"data": json.dumps(data).encode()})
        assert json.loads(text.split("data: ", 1)[1])["type"] == kind.value
        line = event_line(parse_event({**data, "event_id": "1-0"}))
        specific = kind in (EventType.transition, EventType.evaluation)  # their own line, without the message
        assert kind.value in line and (specific or f"about {kind.value}" in line), line


SHARED = ("FINISHED", "SUCCEEDED", "SUCCESS_OUTCOMES", "NODE_ALIVE_SECONDS", "ACTIVE_STATE_NAMES", "ACTIVE_STATES",
          "UNFINISHED_STATES", "TERMINAL", "TERMINAL_STATES")


def test_shared_constants_are_defined_once() -> None:
    homes: dict[str, list[str]] = {}
    for path in _files():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id in SHARED:
                    homes.setdefault(target.id, []).append(str(path.relative_to(ROOT)))
    assert {k: v for k, v in homes.items() if len(v) > 1} == {}
    assert homes["NODE_ALIVE_SECONDS"] == ["store/store.py"] and homes["FINISHED"] == ["statemachine/lifecycle.py"]
