"""One logging setup for `serve`, `worker` (and its slots) and `run`.

A layer of its own so `service/` and `workers/` can both use it without importing each other.
Every line has a timestamp (uvicorn's access lines too: uvicorn is told not to configure
logging, so its records reach this handler); `json` writes one object per line with the
experiment id, node and state where known; the `transitions` library's per-callback INFO
chatter is demoted to DEBUG.

Settings: `--log-level` / AJET_RUNNER_LOG_LEVEL (debug, info, warning, error, critical; default
info) and `--log-format` / AJET_RUNNER_LOG_FORMAT (text or json; default text). `configure`
exports the chosen values to the environment so child processes (the watcher) log the same way.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
from datetime import datetime, timezone
from typing import Any, TextIO

LEVEL_ENV = "AJET_RUNNER_LOG_LEVEL"
FORMAT_ENV = "AJET_RUNNER_LOG_FORMAT"
LEVELS = ("debug", "info", "warning", "error", "critical")
FORMATS = ("text", "json")
CONTEXT_FIELDS = ("experiment", "node", "state")
# Libraries whose INFO lines are per-call noise for an operator; shown only at debug.
CHATTY = ("transitions",)

_context: contextvars.ContextVar[dict[str, str] | None] = contextvars.ContextVar("ajet_runner_log_context",
                                                                               default=None)
_HANDLER_MARK = "_ajet_runner_handler"


class LogSetupError(ValueError):
    """A log level or format that is not one of the known names."""


def bind(**fields: str | None) -> None:
    """Attach experiment/node/state to every later record of this context (None removes a field)."""
    unknown = set(fields) - set(CONTEXT_FIELDS)
    if unknown:
        raise LogSetupError(f"unknown log context field(s): {', '.join(sorted(unknown))}")
    current = dict(_context.get() or {})
    for key, value in fields.items():
        if value is None:
            current.pop(key, None)
        else:
            current[key] = str(value)
    _context.set(current)


def context() -> dict[str, str]:
    return dict(_context.get() or {})


def resolve_level(level: str | None) -> str:
    name = (level or os.environ.get(LEVEL_ENV) or "info").strip().lower()
    if name not in LEVELS:
        raise LogSetupError(f"log level {name!r} is not one of {', '.join(LEVELS)} "
                            f"(--log-level or {LEVEL_ENV})")
    return name


def resolve_format(fmt: str | None) -> str:
    name = (fmt or os.environ.get(FORMAT_ENV) or "text").strip().lower()
    if name not in FORMATS:
        raise LogSetupError(f"log format {name!r} is not one of {', '.join(FORMATS)} "
                            f"(--log-format or {FORMAT_ENV})")
    return name


class _ContextFilter(logging.Filter):
    """Copies the bound context onto the record, and demotes chatty libraries to DEBUG."""

    def __init__(self, component: str, node: str, threshold: int) -> None:
        super().__init__()
        self.component, self.node, self.threshold = component, node, threshold

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".", 1)[0] in CHATTY and record.levelno < logging.WARNING:
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            if self.threshold > logging.DEBUG:
                return False
        record.component = self.component
        fields = {"node": self.node} if self.node else {}
        fields.update(_context.get() or {})
        for key in CONTEXT_FIELDS:
            if not hasattr(record, key) and key in fields:
                setattr(record, key, fields[key])
        return True


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, tz=timezone.utc).isoformat(timespec="milliseconds")


class TextFormatter(logging.Formatter):
    """`2026-12-01T01:02:03.456+00:00 INFO worker ajet_runner.workers.drive.driver [exp node state] message`."""

    def format(self, record: logging.LogRecord) -> str:
        where = " ".join(str(getattr(record, k)) for k in CONTEXT_FIELDS if getattr(record, k, None))
        line = (f"{_timestamp(record)} {record.levelname} {getattr(record, 'component', '-')} {record.name} "
                f"{f'[{where}] ' if where else ''}{record.getMessage()}")
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line; tracebacks go into `exc` so a line is always one record."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {"ts": _timestamp(record), "level": record.levelname.lower(),
                               "component": getattr(record, "component", ""), "logger": record.name,
                               "msg": record.getMessage()}
        for key in CONTEXT_FIELDS:
            value = getattr(record, key, None)
            if value:
                doc[key] = value
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) and len(record.args) == 5:
            # uvicorn's access record: (client, method, path with query, HTTP version, status)
            doc.update(zip(("client", "method", "path", "http_version", "status"), record.args, strict=True))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False, default=str)


def configure(component: str, level: str | None = None, fmt: str | None = None, node: str = "",
              stream: TextIO | None = None) -> str:
    """Install the one root handler (replacing an earlier one of ours) and return the level name.

    Raises LogSetupError for an unknown level or format."""
    level_name, fmt_name = resolve_level(level), resolve_format(fmt)
    threshold = getattr(logging, level_name.upper())
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt_name == "json" else TextFormatter())
    handler.addFilter(_ContextFilter(component, node, threshold))
    setattr(handler, _HANDLER_MARK, True)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, _HANDLER_MARK, False):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(threshold)
    logging.captureWarnings(True)  # Python warnings become records too: one format on stderr
    for name in CHATTY:  # let their records reach the filter, which demotes them
        logging.getLogger(name).setLevel(logging.NOTSET)
    # uvicorn's own loggers propagate to root (uvicorn.run(log_config=None) adds no handlers).
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
    os.environ[LEVEL_ENV], os.environ[FORMAT_ENV] = level_name, fmt_name
    return level_name
