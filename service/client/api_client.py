"""Python client for the ajet-runner HTTP API (the CLI's client commands are built on it).

    from ajet_runner.service.client.api_client import AjetRunnerClient

    with AjetRunnerClient("http://gpu-head:8080", token="s3cret") as api:
        exp = api.submit_file("blueprint_1.md", idempotency_key="bp1-v3")  # ApiError(422) with .problems
        for event in api.follow(exp.id):                     # server-sent events, until finished
            print(event.type, event.get("to", ""))
        print(api.wait(exp.id, timeout=3600).outcome)

Answers are typed (ajet_runner.service.client.answers: Experiment, Event, Node, ...), and still read like
dicts. `AsyncAjetRunnerClient` has the same methods as coroutines (and `follow` as an async
iterator), for asyncio programs that tail several experiments at once.

`AjetRunnerClient.from_env()` reads AJET_RUNNER_URL and AJET_RUNNER_TOKEN (or the first line
of AJET_RUNNER_TOKEN_FILE). Every method raises `ApiError` for an HTTP error answer (with the
status, the server's message and, for rejected blueprints, the problems list) and
`ApiUnavailable` when the server cannot be reached.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, TracebackType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote

import httpx
from httpx_sse import EventSource, ServerSentEvent

from ajet_runner.statemachine.metric_vocabulary import HEADLINE_METRIC

if TYPE_CHECKING:
    from ajet_runner.service.client.answers import (
        DeleteResult,
        Event,
        EventPage,
        Experiment,
        ExperimentPage,
        Node,
        Stage,
        StageSubmission,
    )

DEFAULT_URL = "http://127.0.0.1:8080"
RECONNECT_LIMIT = 30.0  # seconds without any contact with the API before a follower gives up
SSE_READ_TIMEOUT = 45.0  # the server sends a keep-alive every 15 s: three missed ones = a dead connection
T = TypeVar("T")


def _needs_tls(url: str) -> bool:
    """Verify certificates for an https API; for a plain-http one skip building the TLS context (loading the CA
    bundle took 40 ms, a sixth of a CLI call): every request goes to this base URL, redirects are not followed."""
    return not url.lower().startswith("http://")


def _answers() -> ModuleType:
    """The typed answers (pydantic models), imported at the first typed call: a CLI command that prints the
    plain JSON (`scan`, `status`) does not pay pydantic's import, a third of its start-up."""
    from ajet_runner.service.client import answers

    return answers


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
        self.reason = reason
        super().__init__(0, f"cannot reach the ajet-runner API at {url}: {reason}")


class StageNotFound(ApiError):
    """`wait_stage` on a stage the server does not know (never submitted, refused whole, or expired): 404."""


class EmptyStage(RuntimeError):
    """`wait_stage` on a stage that holds no experiment: there is nothing to wait for."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"stage {name} has no experiments: nothing to wait for")


class UnexpectedAnswer(ValueError):
    """A 2xx answer that is not what this version's API sends (the plain-JSON calls' check; the typed calls raise
    pydantic's ValidationError, also a ValueError)."""


def retryable(exc: BaseException) -> bool:
    """Worth another try later: no answer at all, or the server (or a proxy) says it cannot serve now."""
    return isinstance(exc, ApiError) and (exc.status == 0 or exc.status >= 500)


class Reconnect:
    """Bounded exponential reconnect for followers.

    Delays double from `initial` (the server's SSE `retry:` value when it sent one) up to `cap`;
    once there has been no contact with the API for `limit` seconds, `wait` raises
    ApiUnavailable instead of sleeping again.
    """

    def __init__(self, url: str, limit: float = RECONNECT_LIMIT, initial: float = 0.5, cap: float = 8.0) -> None:
        self.url, self.limit, self.initial, self.cap = url, limit, initial, cap
        self.delay = initial
        self.last_contact = time.monotonic()

    def contact(self) -> None:
        self.last_contact = time.monotonic()
        self.delay = self.initial

    def server_retry(self, millis: int) -> None:
        """The SSE `retry:` field: the server's wish for the first reconnect delay."""
        self.initial = self.delay = max(0.05, millis / 1000)

    def pause(self, exc: BaseException) -> float:
        """Seconds to sleep before the next try; raises ApiUnavailable when the limit is reached."""
        silent = time.monotonic() - self.last_contact
        if silent >= self.limit:
            if isinstance(exc, ApiUnavailable):
                why = exc.reason
            elif isinstance(exc, ApiError):
                why = f"HTTP {exc.status}: {exc.detail}"
            else:
                why = str(exc) or type(exc).__name__
            raise ApiUnavailable(self.url, f"no usable answer for {silent:.0f}s (limit {self.limit:g}s); last: "
                                           f"{why}") from exc
        delay = min(self.delay, self.limit - silent)
        self.delay = min(self.delay * 2, self.cap)
        return delay

    def wait(self, exc: BaseException) -> None:
        time.sleep(self.pause(exc))

    def call(self, fn: Callable[[], T]) -> T:
        """`fn()`, retried through outages and 5xx answers until the limit."""
        while True:
            try:
                result = fn()
            except ApiError as exc:
                if not retryable(exc):
                    raise
                self.wait(exc)
                continue
            self.contact()
            return result


@dataclass
class LogChunk:
    """A piece of an experiment's log; pass `offset` as `since` to get what follows (file source only)."""

    text: str
    source: str  # "file": read from the log file; "redis": the last lines kept in Redis
    path: str
    offset: int | None
    state: str


class TokenFileError(ValueError):
    """AJET_RUNNER_TOKEN_FILE names a file that cannot be read or holds no token."""


def token_from_env() -> str:
    """$AJET_RUNNER_TOKEN's first token, else the first line of $AJET_RUNNER_TOKEN_FILE; '' when neither is set.
    A token file that is set but unreadable or empty raises TokenFileError naming it (never silently no token)."""
    token = os.environ.get("AJET_RUNNER_TOKEN", "").split(",")[0].strip()
    path = os.environ.get("AJET_RUNNER_TOKEN_FILE", "")
    return token or (_token_file(path) if path else "")


def _token_file(path: str) -> str:
    """The first line of the token file that is neither blank nor a comment; TokenFileError when none."""
    try:
        lines = [ln.strip() for ln in Path(path).read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TokenFileError(f"AJET_RUNNER_TOKEN_FILE={path}: cannot read it: {why}") from None
    token = next((ln for ln in lines if ln and not ln.startswith("#")), "")
    if not token:
        raise TokenFileError(f"AJET_RUNNER_TOKEN_FILE={path}: holds no token")
    return token


def _submit_body(blueprint: str, node: str | None, priority: str | None, blueprint_path: str | None,
                 wait_for_node: bool = False, nodes: list[str] | None = None, stage: str | None = None
                 ) -> dict[str, Any]:
    body: dict[str, Any] = {"blueprint": blueprint}
    for key, value in (("node", node), ("priority", priority), ("blueprint_path", blueprint_path),
                       ("wait_for_node", wait_for_node), ("nodes", nodes), ("stage", stage)):
        if value:
            body[key] = value
    return body


def _idempotency(key: str | None) -> dict[str, str]:
    return {"Idempotency-Key": key} if key else {}


def _list_params(state: str | None, node: str | None, outcome: str | None, limit: int, offset: int,
                 stage: str | None = None, q: str | None = None, scan_before: str | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {k: v for k, v in {"state": state, "node": node, "outcome": outcome,
                                                "stage": stage, "q": q, "scan_before": scan_before}.items() if v}
    return {**params, "limit": limit, "offset": offset}


BlueprintInput = str | os.PathLike[str] | tuple[str, str]


def _stage_blueprints(blueprints: Sequence[BlueprintInput]) -> list[dict[str, Any]]:
    """Paths are read (their absolute path recorded); a (text, path) pair is sent as it is."""
    out = []
    for item in blueprints:
        if isinstance(item, tuple):
            text, path = item
            out.append({"blueprint": text, **({"blueprint_path": path} if path else {})})
        else:
            p = Path(item)
            out.append({"blueprint": p.read_text(encoding="utf-8"), "blueprint_path": str(p.resolve())})
    return out


def _stage_body(stage: str, blueprints: Sequence[BlueprintInput], sweep: list[str] | None, stage_dir: str | None,
                webhook_url: str | None, node: str | None, priority: str | None, wait_for_node: bool,
                max_experiments: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"stage": stage, "blueprints": _stage_blueprints(blueprints)}
    for key, value in (("sweep", sweep), ("stage_dir", stage_dir), ("webhook_url", webhook_url), ("node", node),
                       ("priority", priority), ("wait_for_node", wait_for_node), ("max_experiments", max_experiments)):
        if value:
            body[key] = value
    return body


def _not_found(name: str, exc: ApiError) -> ApiError:
    """A 404 on a stage as StageNotFound (other errors unchanged)."""
    if exc.status != 404:
        return exc
    return StageNotFound(404, f"no stage named {name!r} (never submitted, refused whole, or its experiments "
                              "expired)", exc.problems)


def _experiments_of(name: str, stage: Stage) -> list[Experiment]:
    if not stage.experiments:
        raise EmptyStage(name)
    return list(stage.experiments)


def _stage_experiments(name: str, look: Callable[[], Stage]) -> list[Experiment]:
    """The stage's experiments at one look; StageNotFound / EmptyStage at once (nothing will ever finish)."""
    try:
        found = look()
    except ApiError as exc:
        raise _not_found(name, exc) from None
    return _experiments_of(name, found)


def _wait_args(name: str | None, ids: list[str] | tuple[str, ...] | None) -> list[str]:
    if bool(name) == bool(ids):
        raise ValueError("give a stage name or experiment ids (one of them)")
    return list(ids or [])


def _log_params(tail: int, since: int | None, raw: bool) -> dict[str, Any]:
    params: dict[str, Any] = {"tail": tail, "raw": raw}
    if since is not None:
        params["since"] = since
    return params


def _log_chunk(resp: httpx.Response) -> LogChunk:
    offset = resp.headers.get("X-Log-Offset", "")
    return LogChunk(text=resp.text, source=resp.headers.get("X-Log-Source", ""),
                    path=unquote(resp.headers.get("X-Log-Path", "")), offset=int(offset) if offset else None,
                    state=resp.headers.get("X-Experiment-State", ""))


def _sse_headers(last: str | None) -> dict[str, str]:
    return {"Accept": "text/event-stream", "Cache-Control": "no-store", **({"Last-Event-ID": last} if last else {})}


def _events_of(sses: Iterator[ServerSentEvent], backoff: Reconnect) -> Iterator[Event]:
    """The stream's events; every message is a sign of contact."""
    for sse in sses:
        event = _contact(sse, backoff)
        if event is not None:
            yield event


async def _aevents_of(sses: AsyncIterator[ServerSentEvent], backoff: Reconnect) -> AsyncIterator[Event]:
    """`_events_of` for the async client."""
    async for sse in sses:
        event = _contact(sse, backoff)
        if event is not None:
            yield event


def _contact(sse: ServerSentEvent, backoff: Reconnect) -> Event | None:
    """A message seen: contact for the backoff (the server's `retry:` its first delay), and its event if any."""
    backoff.contact()
    if sse.retry is not None:
        backoff.server_retry(sse.retry)
    return _event_of(sse)


def _unavailable(url: str, exc: httpx.TransportError) -> ApiUnavailable:
    return ApiUnavailable(url, str(exc) or type(exc).__name__)


def _still_running(recs: list[Experiment], timeout: float | None) -> TimeoutError:
    left = [r.id for r in recs if not r.finished]
    return TimeoutError(f"{len(left)} experiment(s) still not finished after {timeout}s: {', '.join(left)}")


def _pause(interval: float, deadline: float | None) -> float:
    """The next look's wait: `interval`, cut short to end at the deadline."""
    return interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))


def _event_of(sse: ServerSentEvent) -> Event | None:
    """An SSE message as an Event; None for a message without data (e.g. a lone `retry:`)."""
    if not sse.data:
        return None
    try:
        body = json.loads(sse.data)
    except ValueError:
        body = {"data": sse.data}
    if not isinstance(body, dict):
        body = {"data": body}
    body.setdefault("event_id", sse.id or "")
    body.setdefault("type", sse.event or "message")
    return _answers().parse_event(body)


def _sse_timeout(limit: float) -> httpx.Timeout:
    return httpx.Timeout(30.0, connect=max(1.0, min(10.0, limit)), read=SSE_READ_TIMEOUT)


def base_url(url: str) -> str:
    """The API's base URL without a trailing slash; anything but `http(s)://host[:port][/path]` is bad input
    (httpx.UnsupportedProtocol / InvalidURL at once, not a connection error after a reconnect limit)."""
    parsed = httpx.URL(url)
    if parsed.scheme not in ("http", "https"):
        raise httpx.UnsupportedProtocol("it must start with http:// or https://")
    if not parsed.host:
        raise httpx.InvalidURL("it names no host")
    return url.rstrip("/")


class AjetRunnerClient:
    """A synchronous client; one instance keeps one HTTP connection pool (close it, or use `with`)."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = base_url(url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport,
                                  verify=_needs_tls(self.url))

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
        return _body(self._request(method, path, **kwargs))

    # -- experiments --------------------------------------------------------------------------
    def submit(self, blueprint: str, *, node: str | None = None, priority: str | None = None,
               blueprint_path: str | None = None, idempotency_key: str | None = None,
               wait_for_node: bool = False, nodes: list[str] | None = None, stage: str | None = None) -> Experiment:
        """Submit blueprint text; returns the new record (`id`, `state` "queued", ...).

        `nodes`: a multi-node run (nnodes > 1) uses only these nodes, the first as its head. `stage` puts it in
        that stage (a sweep blueprint is submitted with `submit_stage`).

        With `idempotency_key`, submitting again with the same key (a retry after a lost answer)
        returns the first experiment instead of starting a second one. Raises ApiError 422
        (problems, each with `field` and `message`), 409 (needs more GPUs than any live node has,
        or the key was used for another blueprint), 413 (too large).
        """
        return _answers().Experiment.model_validate(self._json(
            "POST", "/v1/experiments", json=_submit_body(blueprint, node, priority, blueprint_path, wait_for_node,
                                                         nodes, stage),
            headers=_idempotency(idempotency_key)))

    def submit_file(self, path: str | os.PathLike[str], *, node: str | None = None, priority: str | None = None,
                    idempotency_key: str | None = None, wait_for_node: bool = False,
                    nodes: list[str] | None = None) -> Experiment:
        """Submit a blueprint file (its absolute path is recorded in the report)."""
        p = Path(path)
        return self.submit(p.read_text(encoding="utf-8"), node=node, priority=priority,
                           blueprint_path=str(p.resolve()), idempotency_key=idempotency_key,
                           wait_for_node=wait_for_node, nodes=nodes)

    def list_experiments(self, *, state: str | None = None, node: str | None = None, outcome: str | None = None,
                         limit: int = 100, offset: int = 0, stage: str | None = None, q: str | None = None,
                         scan_before: str | None = None) -> ExperimentPage:
        """One page, newest first: `items`, `total`, `limit`, `offset`. With `q` (a purpose search over one
        bounded window of the newest candidates), `search` says how many were searched and gives the
        `scan_before` of the next, older window (`next_scan_before`)."""
        return _answers().ExperimentPage.model_validate(self.list_json(
            state=state, node=node, outcome=outcome, limit=limit, offset=offset, stage=stage, q=q,
            scan_before=scan_before))

    def list_json(self, *, state: str | None = None, node: str | None = None, outcome: str | None = None,
                  limit: int = 100, offset: int = 0, stage: str | None = None, q: str | None = None,
                  scan_before: str | None = None) -> dict[str, Any]:
        """`list_experiments` as the server's plain JSON, not validated: for a caller that only prints it."""
        return _page(self._json("GET", "/v1/experiments",
                                params=_list_params(state, node, outcome, limit, offset, stage, q, scan_before)))

    def iter_experiments(self, *, state: str | None = None, node: str | None = None,
                         outcome: str | None = None, page_size: int = 500, stage: str | None = None
                         ) -> Iterator[Experiment]:
        """Every matching experiment, newest first, page after page."""
        for rec in self.iter_json(state=state, node=node, outcome=outcome, page_size=page_size, stage=stage):
            yield _answers().Experiment.model_validate(rec)

    def iter_json(self, *, state: str | None = None, node: str | None = None, outcome: str | None = None,
                  page_size: int = 500, stage: str | None = None) -> Iterator[dict[str, Any]]:
        """`iter_experiments` as the server's plain JSON records."""
        offset = 0
        while True:
            page = self.list_json(state=state, node=node, outcome=outcome, limit=page_size, offset=offset,
                                  stage=stage)
            yield from page["items"]
            offset += len(page["items"])
            if not page["items"] or offset >= page["total"]:
                return

    def get(self, exp_id: str) -> Experiment:
        """The record: state, outcome, node, tmux_session, attempt, timings, latest_metrics, history, ..."""
        return _answers().Experiment.model_validate(self.get_json(exp_id))

    def get_json(self, exp_id: str) -> dict[str, Any]:
        """`get` as the server's plain JSON, not validated."""
        return _record(self._json("GET", f"/v1/experiments/{exp_id}"))

    def stop(self, exp_id: str) -> Experiment:
        """Stop it. A queued one comes back finished (cancelled); a running one with `cancel_requested`
        (its worker stops it gracefully, collects it and writes finish.flag). ApiError 409 if already finished."""
        return _answers().Experiment.model_validate(self._json("POST", f"/v1/experiments/{exp_id}/stop"))

    def delete(self, exp_id: str) -> DeleteResult:
        """Drop the record, stopping it first if needed (`deleted` false = dropped once finished).
        Result files are never deleted."""
        return _answers().DeleteResult.model_validate(self._json("DELETE", f"/v1/experiments/{exp_id}"))

    def events(self, exp_id: str, *, after: str = "0-0", limit: int = 1000, wait_ms: int = 0) -> EventPage:
        """A page of events after stream id `after`: `events`, `next_after`, `finished`; `wait_ms` long-polls."""
        timeout = self._http.timeout.read or 30.0
        return _answers().EventPage.model_validate(self._json(
            "GET", f"/v1/experiments/{exp_id}/events", params={"after": after, "limit": limit, "wait_ms": wait_ms},
            timeout=httpx.Timeout(timeout + wait_ms / 1000)))

    def follow(self, exp_id: str, *, last_event_id: str | None = None, reconnect: bool = True,
               reconnect_limit: float = RECONNECT_LIMIT) -> Iterator[Event]:
        """Server-sent events until the experiment is finished (or deleted).

        A cut connection, or a 5xx answer, is retried with exponential delays (starting at the server's
        `retry:`), resuming with `Last-Event-ID`; after `reconnect_limit` seconds without contact it
        raises ApiUnavailable. 4xx answers (404, 401) raise ApiError at once.
        """
        last = last_event_id
        backoff = Reconnect(self.url, reconnect_limit)
        while True:
            try:
                with self._http.stream("GET", f"/v1/experiments/{exp_id}/events", headers=_sse_headers(last),
                                       timeout=_sse_timeout(reconnect_limit)) as resp:
                    if resp.status_code >= 400:
                        resp.read()
                        raise _error(resp)
                    backoff.contact()
                    for event in _events_of(EventSource(resp).iter_sse(), backoff):
                        last = event.event_id or last
                        yield event
                return  # the server ended the stream: finished (or deleted)
            except httpx.TransportError as exc:
                if not reconnect:
                    raise _unavailable(self.url, exc) from exc
                backoff.wait(_unavailable(self.url, exc))
            except ApiError as exc:
                if not (reconnect and retryable(exc)):
                    raise
                backoff.wait(exc)

    def log(self, exp_id: str, *, tail: int = 200, since: int | None = None, raw: bool = False) -> LogChunk:
        """The latest attempt's log: the last `tail` lines, or what came after byte offset `since`."""
        return _log_chunk(self._request("GET", f"/v1/experiments/{exp_id}/log", params=_log_params(tail, since, raw)))

    def wait(self, exp_id: str, timeout: float | None = None, *, interval: float = 2.0,
             reconnect_limit: float = RECONNECT_LIMIT) -> Experiment:
        """Block until the experiment is finished; returns its final record.

        TimeoutError after `timeout` seconds; outages shorter than `reconnect_limit` are ridden out.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Reconnect(self.url, reconnect_limit)
        while True:
            rec = backoff.call(lambda: self.get(exp_id))
            if rec.finished:
                return rec
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{exp_id} is still {rec.state} after {timeout}s")
            time.sleep(_pause(interval, deadline))

    # -- stages -----------------------------------------------------------------------------------
    def submit_stage(self, stage: str, blueprints: Sequence[BlueprintInput], *, sweep: list[str] | None = None,
                     stage_dir: str | None = None, webhook_url: str | None = None, node: str | None = None,
                     priority: str | None = None, wait_for_node: bool = False,
                     idempotency_key: str | None = None, max_experiments: int | None = None) -> StageSubmission:
        """Submit blueprints (paths, or (text, path) pairs) as stage `stage`; a blueprint with an `[exp_sweep]`
        part, or the `sweep` options (`KEY=V1,V2`), becomes one experiment per combination (at most 64 unless
        `max_experiments` allows more, up to 1000). `refused` lists
        experiments the submission refused while the others were submitted; ApiError 422/409 when none was.
        With `idempotency_key`, a retry with the same request is the same stage (never a second run of it)."""
        return _answers().StageSubmission.model_validate(self._json("POST", "/v1/stages", json=_stage_body(
            stage, blueprints, sweep, stage_dir, webhook_url, node, priority, wait_for_node, max_experiments),
            headers=_idempotency(idempotency_key)))

    def stages(self) -> list[Stage]:
        """Every stage, newest first, with counts by state and outcome."""
        return [_answers().Stage.model_validate(s) for s in self._json("GET", "/v1/stages")]

    def stage(self, name: str) -> Stage:
        """One stage with its experiments (in submission order); ApiError 404 when there is none."""
        return _answers().Stage.model_validate(self._json("GET", f"/v1/stages/{name}"))

    def stage_add(self, name: str, *, ids: list[str] | None = None, result_dirs: list[str] | None = None) -> Stage:
        """Put existing experiments (by id, or a result dir they ran in) into stage `name`."""
        return _answers().Stage.model_validate(self._json("POST", f"/v1/stages/{name}/experiments",
                                               json={"ids": ids or [], "result_dirs": result_dirs or []}))

    def stage_facts(self, name: str) -> list[dict[str, Any]]:
        """What a comparison reads of each experiment (statemachine/comparison/compare.py ExperimentFacts, as JSON)."""
        return list(self._json("GET", f"/v1/stages/{name}/facts"))

    def stage_comparison(self, name: str, metric: str = HEADLINE_METRIC) -> dict[str, Any]:
        """The stage compared by the server (rows, what differs, rankings, repeats, curves)."""
        return dict(self._json("GET", f"/v1/stages/{name}/comparison", params={"metric": metric}))

    def wait_stage(self, name: str | None = None, ids: list[str] | None = None, *, timeout: float | None = None,
                   interval: float = 2.0, reconnect_limit: float = RECONNECT_LIMIT,
                   on_update: Callable[[list[Experiment]], None] | None = None) -> list[Experiment]:
        """Block until every experiment of stage `name` (or every one of `ids`) is finished; returns their final
        records in order. `on_update` gets the records at each look. TimeoutError after `timeout` seconds;
        at once StageNotFound (an unknown stage) or EmptyStage (one with no experiments)."""
        wanted = _wait_args(name, ids)
        deadline = None if timeout is None else time.monotonic() + timeout
        backoff = Reconnect(self.url, reconnect_limit)
        while True:
            recs = self._look_at(name, wanted, backoff)
            if on_update is not None:
                on_update(recs)
            if recs and all(r.finished for r in recs):
                return recs
            if deadline is not None and time.monotonic() >= deadline:
                raise _still_running(recs, timeout)
            time.sleep(_pause(interval, deadline))

    def _look_at(self, name: str | None, wanted: list[str], backoff: Reconnect) -> list[Experiment]:
        """The stage's experiments (StageNotFound, EmptyStage), or each of `wanted`, outages ridden out."""
        if name:
            return _stage_experiments(name, lambda: backoff.call(lambda: self.stage(name)))
        return [backoff.call(functools.partial(self.get, i)) for i in wanted]

    # -- cluster ----------------------------------------------------------------------------------
    def nodes(self) -> list[Node]:
        """Workers that sent a heartbeat: name, alive, heartbeat_age_seconds, gpus, gpus_busy, running, ..."""
        return [_answers().Node.model_validate(n) for n in self._json("GET", "/v1/nodes")]

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


class AsyncAjetRunnerClient:
    """The same API for asyncio: every method is a coroutine, `follow` an async iterator."""

    def __init__(self, url: str = DEFAULT_URL, token: str | None = None, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.url = base_url(url)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=timeout, transport=transport,
                                       verify=_needs_tls(self.url))

    @classmethod
    def from_env(cls, url: str | None = None, token: str | None = None) -> AsyncAjetRunnerClient:
        return cls(url or os.environ.get("AJET_RUNNER_URL") or DEFAULT_URL, token or token_from_env() or None)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> AsyncAjetRunnerClient:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            resp = await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ApiUnavailable(self.url, str(exc) or type(exc).__name__) from exc
        if resp.status_code >= 400:
            raise _error(resp)
        return resp

    async def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return _body(await self._request(method, path, **kwargs))

    async def submit(self, blueprint: str, *, node: str | None = None, priority: str | None = None,
                     blueprint_path: str | None = None, idempotency_key: str | None = None,
                     wait_for_node: bool = False, stage: str | None = None) -> Experiment:
        return _answers().Experiment.model_validate(await self._json(
            "POST", "/v1/experiments", json=_submit_body(blueprint, node, priority, blueprint_path, wait_for_node,
                                                         stage=stage),
            headers=_idempotency(idempotency_key)))

    async def submit_file(self, path: str | os.PathLike[str], *, node: str | None = None,
                          priority: str | None = None, idempotency_key: str | None = None) -> Experiment:
        p = Path(path)
        return await self.submit(p.read_text(encoding="utf-8"), node=node, priority=priority,
                                 blueprint_path=str(p.resolve()), idempotency_key=idempotency_key)

    async def list_experiments(self, *, state: str | None = None, node: str | None = None,
                               outcome: str | None = None, limit: int = 100, offset: int = 0,
                               stage: str | None = None, q: str | None = None,
                               scan_before: str | None = None) -> ExperimentPage:
        return _answers().ExperimentPage.model_validate(await self._json(
            "GET", "/v1/experiments", params=_list_params(state, node, outcome, limit, offset, stage, q,
                                                          scan_before)))

    async def get(self, exp_id: str) -> Experiment:
        return _answers().Experiment.model_validate(await self._json("GET", f"/v1/experiments/{exp_id}"))

    async def stop(self, exp_id: str) -> Experiment:
        return _answers().Experiment.model_validate(await self._json("POST", f"/v1/experiments/{exp_id}/stop"))

    async def delete(self, exp_id: str) -> DeleteResult:
        return _answers().DeleteResult.model_validate(await self._json("DELETE", f"/v1/experiments/{exp_id}"))

    async def events(self, exp_id: str, *, after: str = "0-0", limit: int = 1000, wait_ms: int = 0) -> EventPage:
        timeout = self._http.timeout.read or 30.0
        return _answers().EventPage.model_validate(await self._json(
            "GET", f"/v1/experiments/{exp_id}/events", params={"after": after, "limit": limit, "wait_ms": wait_ms},
            timeout=httpx.Timeout(timeout + wait_ms / 1000)))

    async def follow(self, exp_id: str, *, last_event_id: str | None = None,
                     reconnect_limit: float = RECONNECT_LIMIT) -> AsyncIterator[Event]:
        """Server-sent events until finished, with the same bounded reconnect as the sync client."""
        import asyncio  # only the async client needs it: every CLI call would pay for it

        last = last_event_id
        backoff = Reconnect(self.url, reconnect_limit)
        while True:
            try:
                async with self._http.stream("GET", f"/v1/experiments/{exp_id}/events", headers=_sse_headers(last),
                                             timeout=_sse_timeout(reconnect_limit)) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise _error(resp)
                    backoff.contact()
                    async for event in _aevents_of(EventSource(resp).aiter_sse(), backoff):
                        last = event.event_id or last
                        yield event
                return
            except httpx.TransportError as exc:
                await asyncio.sleep(backoff.pause(_unavailable(self.url, exc)))
            except ApiError as exc:
                if not retryable(exc):
                    raise
                await asyncio.sleep(backoff.pause(exc))

    async def log(self, exp_id: str, *, tail: int = 200, since: int | None = None, raw: bool = False) -> LogChunk:
        return _log_chunk(await self._request("GET", f"/v1/experiments/{exp_id}/log",
                                              params=_log_params(tail, since, raw)))

    async def wait(self, exp_id: str, timeout: float | None = None, *, interval: float = 2.0) -> Experiment:
        """The final record once finished; TimeoutError after `timeout` seconds."""
        import asyncio  # only the async client needs it: every CLI call would pay for it

        async def until_finished() -> Experiment:
            while True:
                rec = await self.get(exp_id)
                if rec.finished:
                    return rec
                await asyncio.sleep(interval)

        try:
            return await asyncio.wait_for(until_finished(), timeout)
        except asyncio.TimeoutError as exc:
            raise TimeoutError(f"{exp_id} is not finished after {timeout}s") from exc

    async def submit_stage(self, stage: str, blueprints: Sequence[BlueprintInput], *, sweep: list[str] | None = None,
                           stage_dir: str | None = None, webhook_url: str | None = None, node: str | None = None,
                           priority: str | None = None, wait_for_node: bool = False,
                           idempotency_key: str | None = None, max_experiments: int | None = None) -> StageSubmission:
        return _answers().StageSubmission.model_validate(await self._json("POST", "/v1/stages", json=_stage_body(
            stage, blueprints, sweep, stage_dir, webhook_url, node, priority, wait_for_node, max_experiments),
            headers=_idempotency(idempotency_key)))

    async def stages(self) -> list[Stage]:
        return [_answers().Stage.model_validate(s) for s in await self._json("GET", "/v1/stages")]

    async def stage(self, name: str) -> Stage:
        return _answers().Stage.model_validate(await self._json("GET", f"/v1/stages/{name}"))

    async def stage_add(self, name: str, *, ids: list[str] | None = None,
                        result_dirs: list[str] | None = None) -> Stage:
        return _answers().Stage.model_validate(await self._json("POST", f"/v1/stages/{name}/experiments",
                                                     json={"ids": ids or [], "result_dirs": result_dirs or []}))

    async def stage_facts(self, name: str) -> list[dict[str, Any]]:
        return list(await self._json("GET", f"/v1/stages/{name}/facts"))

    async def stage_comparison(self, name: str, metric: str = HEADLINE_METRIC) -> dict[str, Any]:
        return dict(await self._json("GET", f"/v1/stages/{name}/comparison", params={"metric": metric}))

    async def wait_stage(self, name: str | None = None, ids: list[str] | None = None, *,
                         timeout: float | None = None, interval: float = 2.0,
                         on_update: Callable[[list[Experiment]], None] | None = None) -> list[Experiment]:
        """As the sync client's: every experiment's final record once all are finished."""
        import asyncio  # only the async client needs it: every CLI call would pay for it

        wanted = _wait_args(name, ids)

        async def until_finished() -> list[Experiment]:
            while True:
                if name:
                    try:
                        found = await self.stage(name)
                    except ApiError as exc:
                        raise _not_found(name, exc) from None
                    recs = _experiments_of(name, found)
                else:
                    recs = list(await asyncio.gather(*(self.get(i) for i in wanted)))
                if on_update is not None:
                    on_update(recs)
                if recs and all(r.finished for r in recs):
                    return recs
                await asyncio.sleep(interval)

        try:
            return await asyncio.wait_for(until_finished(), timeout)
        except asyncio.TimeoutError as exc:
            raise TimeoutError(f"stage {name or ', '.join(wanted)} is not finished after {timeout}s") from exc

    async def nodes(self) -> list[Node]:
        return [_answers().Node.model_validate(n) for n in await self._json("GET", "/v1/nodes")]


def _record(body: Any) -> dict[str, Any]:
    """An unvalidated answer is still checked to be a record: anything else is not an ajet-runner server's."""
    if not isinstance(body, dict) or not isinstance(body.get("id"), str) or not isinstance(body.get("state"), str):
        raise UnexpectedAnswer(f"expected an experiment record, got {_shape(body)}")
    return body


def _page(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict) or not isinstance(body.get("items"), list) or not isinstance(body.get("total"), int):
        raise UnexpectedAnswer(f"expected a page of experiments, got {_shape(body)}")
    for rec in body["items"]:
        _record(rec)
    return body


def _shape(body: Any) -> str:
    return f"an object with {', '.join(sorted(map(str, body))[:8]) or 'no fields'}" if isinstance(body, dict) \
        else type(body).__name__


def _body(resp: httpx.Response) -> Any:
    try:
        return resp.json()
    except ValueError as exc:
        raise ApiError(resp.status_code, f"the API answered {resp.headers.get('content-type', '?')}, not JSON"
                       ) from exc


def _error(resp: httpx.Response) -> ApiError:
    try:
        body = resp.json()
    except ValueError:
        text = resp.text.strip().splitlines()
        return ApiError(resp.status_code, (text[0][:300] if text else "") or resp.reason_phrase)
    if not isinstance(body, dict):
        return ApiError(resp.status_code, str(body))
    return ApiError(resp.status_code, str(body.get("detail", resp.reason_phrase)), body.get("problems") or [])
