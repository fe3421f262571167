"""Python client for the ajet-runner HTTP API (the CLI's client commands are built on it).

    from service.client import AjetRunnerClient

    with AjetRunnerClient("http://gpu-head:8080", token="s3cret") as api:
        exp = api.submit_file("blueprint_1.md")            # raises ApiError(422) with .problems
        for event in api.follow(exp["id"]):                  # server-sent events, until finished
            print(event["type"], event.get("to", ""))
        print(api.get(exp["id"])["outcome"])

`AjetRunnerClient.from_env()` reads AJET_RUNNER_URL and AJET_RUNNER_TOKEN (or the first line
of AJET_RUNNER_TOKEN_FILE). Every method raises `ApiError` for an HTTP error answer (with the
status, the server's message and, for rejected blueprints, the problems list) and
`ApiUnavailable` when the server cannot be reached.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote

import httpx

DEFAULT_URL = "http://127.0.0.1:8080"
FINISHED = "finished"


class ApiError(RuntimeError):
    """The server answered with an error status."""

    def __init__(self, status: int, detail: str, problems: list[dict[str, Any]] | None = None) -> None:
        self.status = status
        self.detail = detail
        self.problems = problems or []
        super().__init__(f"HTTP {status}: {detail}")


class ApiUnavailable(ApiError):
    """No answer at all: connection refused, DNS failure, timeout."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(0, f"cannot reach the ajet-runner API at {url}: {reason}")


@dataclass
class LogChunk:
    """A piece of an experiment's log; pass `offset` as `since` to get what follows (file source only)."""

    text: str
    source: str  # "file": read from the log file; "redis": the last lines kept in Redis
    path: str
    offset: int | None
    state: str


def token_from_env() -> str:
    token = os.environ.get("AJET_RUNNER_TOKEN", "").split(",")[0].strip()
    path = os.environ.get("AJET_RUNNER_TOKEN_FILE", "")
    if not token and path:
        try:
            lines = [ln.strip() for ln in Path(path).read_text(encoding="utf-8").splitlines()]
        except OSError:
            lines = []
        token = next((ln for ln in lines if ln and not ln.startswith("#")), "")
    return token


class AjetRunnerClient:
    """A synchronous client; one instance keeps one HTTP connection pool (close it, or use `with`)."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    @classmethod
    def from_env(cls, url: str | None = None, token: str | None = None) -> AjetRunnerClient:
        return cls(url or os.environ.get("AJET_RUNNER_URL") or DEFAULT_URL, token or token_from_env() or None)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> AjetRunnerClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- plumbing ---------------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiUnavailable(self.url, str(exc) or type(exc).__name__) from exc
        if resp.status_code >= 400:
            raise _error(resp)
        return resp

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self._request(method, path, **kwargs).json()

    # -- experiments --------------------------------------------------------------------------
    def submit(self, blueprint: str, *, node: str | None = None, priority: str | None = None,
               blueprint_path: str | None = None, wait_for_node: bool = False) -> dict[str, Any]:
        """Submit blueprint text; returns the new record (`id`, `state` "queued", ...).

        Raises ApiError 422 (problems, each with `field` and `message`), 409 (needs more GPUs than any
        live node has), 413 (too large).
        """
        body: dict[str, Any] = {"blueprint": blueprint}
        if node:
            body["node"] = node
        if priority:
            body["priority"] = priority
        if blueprint_path:
            body["blueprint_path"] = blueprint_path
        if wait_for_node:
            body["wait_for_node"] = True
        return self._json("POST", "/v1/experiments", json=body)  # type: ignore[no-any-return]

    def submit_file(self, path: str | os.PathLike[str], *, node: str | None = None,
                    priority: str | None = None, wait_for_node: bool = False) -> dict[str, Any]:
        """Submit a blueprint file (its absolute path is recorded in the report)."""
        p = Path(path)
        return self.submit(p.read_text(encoding="utf-8"), node=node, priority=priority,
                           blueprint_path=str(p.resolve()), wait_for_node=wait_for_node)

    def list_experiments(self, *, state: str | None = None, node: str | None = None, outcome: str | None = None,
             limit: int = 100, offset: int = 0) -> dict[str, Any]:
        """One page, newest first: `{"items": [...], "total", "limit", "offset"}`."""
        params = {k: v for k, v in {"state": state, "node": node, "outcome": outcome}.items() if v}
        return self._json("GET", "/v1/experiments",  # type: ignore[no-any-return]
                          params={**params, "limit": limit, "offset": offset})

    def iter_experiments(self, *, state: str | None = None, node: str | None = None,
                         outcome: str | None = None, page_size: int = 500) -> Iterator[dict[str, Any]]:
        """Every matching experiment, newest first, page after page."""
        offset = 0
        while True:
            page = self.list_experiments(state=state, node=node, outcome=outcome, limit=page_size, offset=offset)
            yield from page["items"]
            offset += len(page["items"])
            if not page["items"] or offset >= page["total"]:
                return

    def get(self, exp_id: str) -> dict[str, Any]:
        """The record: state, outcome, node, tmux_session, attempt, timings, latest_metrics, history, ..."""
        return self._json("GET", f"/v1/experiments/{exp_id}")  # type: ignore[no-any-return]

    def stop(self, exp_id: str) -> dict[str, Any]:
        """Stop it. A queued one comes back finished (cancelled); a running one with `cancel_requested`
        (its worker stops it gracefully, collects it and writes finish.flag). ApiError 409 if already finished."""
        return self._json("POST", f"/v1/experiments/{exp_id}/stop")  # type: ignore[no-any-return]

    def delete(self, exp_id: str) -> dict[str, Any]:
        """Drop the record, stopping it first if needed (`deleted` false = dropped once finished).
        Result files are never deleted."""
        return self._json("DELETE", f"/v1/experiments/{exp_id}")  # type: ignore[no-any-return]

    def events(self, exp_id: str, *, after: str = "0-0", limit: int = 1000, wait_ms: int = 0) -> dict[str, Any]:
        """A page of events after stream id `after`: `{"events", "next_after", "finished"}`; `wait_ms` long-polls."""
        timeout = self._http.timeout.read or 30.0
        return self._json("GET", f"/v1/experiments/{exp_id}/events",  # type: ignore[no-any-return]
                          params={"after": after, "limit": limit, "wait_ms": wait_ms},
                          timeout=httpx.Timeout(timeout + wait_ms / 1000))

    def follow(self, exp_id: str, *, last_event_id: str | None = None, reconnect: bool = True
               ) -> Iterator[dict[str, Any]]:
        """Server-sent events until the experiment is finished; reconnects with Last-Event-ID if cut off."""
        last = last_event_id
        while True:
            headers = {"Accept": "text/event-stream", **({"Last-Event-ID": last} if last else {})}
            try:
                with self._http.stream("GET", f"/v1/experiments/{exp_id}/events", headers=headers,
                                       timeout=httpx.Timeout(30.0, read=None)) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        raise _error(resp)
                    for event in _parse_sse(resp.iter_lines()):
                        last = event.get("event_id") or last
                        yield event
                return  # the server ended the stream: finished (or deleted)
            except httpx.TransportError as exc:
                if not reconnect:
                    raise ApiUnavailable(self.url, str(exc) or type(exc).__name__) from exc
                time.sleep(1.0)

    def log(self, exp_id: str, *, tail: int = 200, since: int | None = None, raw: bool = False) -> LogChunk:
        """The latest attempt's log: the last `tail` lines, or what came after byte offset `since`."""
        params: dict[str, Any] = {"tail": tail, "raw": raw}
        if since is not None:
            params["since"] = since
        resp = self._request("GET", f"/v1/experiments/{exp_id}/log", params=params)
        offset = resp.headers.get("X-Log-Offset", "")
        return LogChunk(text=resp.text, source=resp.headers.get("X-Log-Source", ""),
                        path=unquote(resp.headers.get("X-Log-Path", "")), offset=int(offset) if offset else None,
                        state=resp.headers.get("X-Experiment-State", ""))

    def wait(self, exp_id: str, *, timeout: float | None = None, interval: float = 2.0) -> dict[str, Any]:
        """Block until the experiment is finished; returns its final record. TimeoutError after `timeout`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rec = self.get(exp_id)
            if rec["state"] == FINISHED:
                return rec
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{exp_id} is still {rec['state']} after {timeout}s")
            time.sleep(interval)

    # -- cluster ----------------------------------------------------------------------------------
    def nodes(self) -> list[dict[str, Any]]:
        """Workers that sent a heartbeat: name, alive, heartbeat_age_seconds, gpus, gpus_busy, running."""
        return self._json("GET", "/v1/nodes")  # type: ignore[no-any-return]

    def healthy(self) -> bool:
        try:
            return self._http.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    def ready(self) -> bool:
        """The server is up and reaches Redis."""
        try:
            return self._http.get("/readyz").status_code == 200
        except httpx.TransportError:
            return False


def _error(resp: httpx.Response) -> ApiError:
    try:
        body = resp.json()
    except ValueError:
        return ApiError(resp.status_code, resp.text.strip() or resp.reason_phrase)
    if not isinstance(body, dict):
        return ApiError(resp.status_code, str(body))
    return ApiError(resp.status_code, str(body.get("detail", resp.reason_phrase)), body.get("problems") or [])


def _parse_sse(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """The event-stream format: `field: value` lines, an event per blank line, `:` comments."""
    data: list[str] = []
    event_id, kind = "", ""
    for line in lines:
        if not line:
            if data:
                try:
                    event = json.loads("\n".join(data))
                except ValueError:
                    event = {"data": "\n".join(data)}
                if isinstance(event, dict):
                    event.setdefault("event_id", event_id)
                    event.setdefault("type", kind or "message")
                    yield event
            data, event_id, kind = [], "", ""
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "id":
            event_id = value
        elif name == "event":
            kind = value
