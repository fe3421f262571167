"""The one logging setup: timestamps, json lines with context, levels, library chatter demoted."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import pytest

import ajet_runner.logsetup as logsetup
from ajet_runner.logsetup import FORMAT_ENV, LEVEL_ENV, LogSetupError, bind, configure

ISO = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00 ")


@pytest.fixture()
def stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """Restores the root logger and the environment configure() writes to."""
    monkeypatch.delenv(LEVEL_ENV, raising=False)
    monkeypatch.delenv(FORMAT_ENV, raising=False)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield io.StringIO()
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)
    logging.captureWarnings(False)
    bind(experiment=None, node=None, state=None)


def lines(stream: io.StringIO) -> list[str]:
    return [line for line in stream.getvalue().splitlines() if line]


def test_text_lines_have_a_timestamp_level_component_and_context(stream: io.StringIO) -> None:
    configure("worker", "info", "text", node="gpu-1", stream=stream)
    logging.getLogger("ajet_runner.workers.drive.driver").info("plain")
    bind(experiment="exp-1", state="running")
    logging.getLogger("ajet_runner.workers.drive.driver").warning("with context")
    first, second = lines(stream)
    assert ISO.match(first) and first.endswith("INFO worker ajet_runner.workers.drive.driver [gpu-1] plain")
    assert ISO.match(second)
    assert second.endswith("WARNING worker ajet_runner.workers.drive.driver [exp-1 gpu-1 running] with context")


def test_json_is_one_object_per_line_with_experiment_node_state(stream: io.StringIO) -> None:
    configure("worker", "info", "json", node="gpu-1", stream=stream)
    bind(experiment="exp-2", state="launching")
    try:
        raise RuntimeError("boom\nsecond line")
    except RuntimeError:
        logging.getLogger("ajet_runner.workers.drive.driver").exception("failed: %s", "x")
    out = lines(stream)
    assert len(out) == 1  # the traceback stays inside the object
    doc = json.loads(out[0])
    assert doc["level"] == "error" and doc["msg"] == "failed: x" and doc["logger"] == "ajet_runner.workers.drive.driver"
    assert (doc["experiment"], doc["node"], doc["state"], doc["component"]) == ("exp-2", "gpu-1", "launching", "worker")
    assert "RuntimeError: boom" in doc["exc"]
    assert re.match(r"^\d{4}-\d\d-\d\dT", doc["ts"])


def test_transitions_info_is_hidden_at_info_and_shown_as_debug_at_debug(stream: io.StringIO) -> None:
    configure("worker", "info", "text", stream=stream)
    logging.getLogger("transitions.core").info("Executed callback 'x'")
    logging.getLogger("transitions.core").warning("a real warning")
    assert [line.split(" ", 2)[1] for line in lines(stream)] == ["WARNING"]
    stream.truncate(0)
    stream.seek(0)
    configure("worker", "debug", "text", stream=stream)
    logging.getLogger("transitions.core").info("Executed callback 'x'")
    (line,) = lines(stream)
    assert " DEBUG worker transitions.core Executed callback 'x'" in line


def test_level_and_format_come_from_the_environment_and_are_exported(
        stream: io.StringIO, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEVEL_ENV, "WARNING")
    monkeypatch.setenv(FORMAT_ENV, "json")
    assert configure("serve", stream=stream) == "warning"
    logging.getLogger("ajet_runner.service.api.application").info("hidden")
    logging.getLogger("ajet_runner.service.api.application").warning("shown")
    assert [json.loads(x)["msg"] for x in lines(stream)] == ["shown"]
    configure("serve", "debug", "text", stream=stream)  # an explicit option wins and is exported for children
    assert (logsetup.os.environ[LEVEL_ENV], logsetup.os.environ[FORMAT_ENV]) == ("debug", "text")


def test_configure_twice_keeps_one_handler(stream: io.StringIO) -> None:
    configure("run", "info", "text", stream=stream)
    configure("run", "info", "text", stream=stream)
    logging.getLogger("x").info("once")
    assert len(lines(stream)) == 1


@pytest.mark.parametrize(("level", "fmt", "named"), [("loud", "text", "log level 'loud'"),
                                                     ("info", "xml", "log format 'xml'")])
def test_unknown_names_are_refused_naming_the_problem(stream: io.StringIO, level: str, fmt: str, named: str) -> None:
    with pytest.raises(LogSetupError, match=named):
        configure("serve", level, fmt, stream=stream)


def test_bind_refuses_unknown_fields() -> None:
    with pytest.raises(LogSetupError, match="purpose"):
        bind(purpose="x")
