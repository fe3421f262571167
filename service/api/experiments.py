"""/v1/experiments (submit, list, inspect, stop, delete, log) and /v1/nodes."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Response, status
from fastapi.responses import JSONResponse, PlainTextResponse

from ajet_runner.service.api.backend import Backend, backend
from ajet_runner.service.api.errors import BODY_ERRORS, V1_ERRORS, error_body, error_responses
from ajet_runner.service.api.listing import list_page
from ajet_runner.service.api.schemas import (
    MAX_BYTE_OFFSET,
    MAX_OFFSET,
    STAGE_PATTERN,
    DeleteResult,
    ExperimentPage,
    ExperimentView,
    NodeView,
    SubmitRequest,
    node_dict,
    view_dict,
)
from ajet_runner.statemachine.lifecycle import Outcome, State
from ajet_runner.store.per_experiment.filters import Query as ListQuery
from ajet_runner.store.per_experiment.idempotency import KEY_PATTERN as IDEMPOTENCY_KEY_PATTERN
from ajet_runner.store.store import NODE_ALIVE_SECONDS

router = APIRouter(prefix="/v1", tags=["experiments"], responses=error_responses(*V1_ERRORS))
NOT_FOUND = error_responses(404)
MAX_LOG_CHUNK = 1_000_000
SUBMIT_THREADS = 4  # submissions in progress at once (the rest wait for a thread; the GIL runs one anyway)


def not_found(exp_id: str) -> HTTPException:
    return HTTPException(status.HTTP_404_NOT_FOUND, f"no experiment with id {exp_id!r} (never submitted, or deleted)")


def _record(be: Backend, exp_id: str) -> dict[str, Any]:
    rec = be.store.records.raw(exp_id)
    if rec is None:
        raise not_found(exp_id)
    return rec


@router.post("/experiments", status_code=201, response_model=ExperimentView, responses={
    200: {"model": ExperimentView, "description": "a repeated Idempotency-Key: the first submission's record"},
    **error_responses(409, *BODY_ERRORS, notes={
        409: "needs more GPUs than any live node has, its result dir belongs to an unfinished experiment, "
            "or an Idempotency-Key was reused for another blueprint or another placement (node, nodes, "
            "priority, blueprint_path, stage), or for a stage",
        422: "blueprint problems, each naming its field"})})
async def create_experiment(
    body: SubmitRequest,
    response: Response,
    idempotency_key: str | None = Header(None, pattern=IDEMPOTENCY_KEY_PATTERN, description=(
        "names this submission: a repeated key answers 200 with the first submission's record, never a second "
        "experiment")),
    be: Backend = Depends(backend),
) -> Any:
    """Validate, record and enqueue a blueprint. Problems come back as a list, each naming its field."""
    # Off the event loop (it reads files and Redis), on the submissions' own threads: a plain executor
    # hop costs a fraction of the generic threadpool's, which was a tenth of a submission's CPU.
    call = contextvars.copy_context().run
    return await asyncio.get_running_loop().run_in_executor(
        _submit_pool(), call, submit_blocking, body, response, idempotency_key, be)


@functools.cache
def _submit_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(SUBMIT_THREADS, thread_name_prefix="submit")


def submit_blocking(body: SubmitRequest, response: Response, idempotency_key: str | None, be: Backend) -> Any:
    """POST /v1/experiments, blocking (the web console's submit page calls it too): the record's view,
    or a JSONResponse with the problems."""
    from ajet_runner.service.submit import SubmissionRejected, submit

    held, answer = _claim_key(be, body, idempotency_key, response) if idempotency_key else (None, None)
    if answer is not None:
        return answer
    try:
        rec = submit(be.store, body.blueprint, blueprint_path=body.blueprint_path or "", node=body.node,
                     nodes=body.nodes, priority=body.priority, allowed_roots=be.allowed_roots,
                     check_disk=be.settings.submit_check_disk, exp_id=held.exp_id if held else None,
                     wait_for_node=body.wait_for_node, stage=body.stage)
    except SubmissionRejected as exc:
        _release_key(be, idempotency_key, held)
        why = "; ".join(f"{p.field}: {p.message}" for p in exc.problems)
        detail = ("cannot be placed now: " if exc.status == 409 else "blueprint rejected: ") + why
        return JSONResponse(status_code=exc.status, content=error_body(
            detail, [p.model_dump(mode="json") for p in exc.problems]))
    except BaseException:
        _release_key(be, idempotency_key, held)
        raise
    response.headers["Location"] = f"/v1/experiments/{rec['id']}"
    return view_dict(rec)


def _claim_key(be: Backend, body: SubmitRequest, key: str, response: Response) -> tuple[Any, Any]:
    """Claim the Idempotency-Key: (the claim, None) for a new submission; (None, the answer) when the key
    already names an experiment (its view, 200) or another submission (409)."""
    from ajet_runner.store.per_experiment.idempotency import IdempotencyConflict, claim, first_record
    from ajet_runner.store.store import new_id

    placement = {"node": body.node, "nodes": body.nodes, "priority": body.priority or "normal",
                 "blueprint_path": body.blueprint_path, **({"stage": body.stage} if body.stage else {})}
    try:
        while True:
            held = claim(be.store, key, body.blueprint, new_id, placement=placement)
            if held.fresh:
                return held, None
            rec = first_record(be.store, key, held)
            if rec is not None:
                response.status_code = status.HTTP_200_OK
                response.headers["Location"] = f"/v1/experiments/{rec['id']}"
                return None, view_dict(rec)
    except IdempotencyConflict as exc:
        return None, JSONResponse(status_code=409, content=error_body(str(exc), [
            {"level": "error", "field": "Idempotency-Key", "message": str(exc)}]))


def _release_key(be: Backend, key: str | None, held: Any) -> None:
    """A submission that failed gives its Idempotency-Key back."""
    from ajet_runner.store.per_experiment.idempotency import release

    if held and key:
        release(be.store, key, held)


@router.get("/experiments", response_model=ExperimentPage)
def list_experiments(
    state: State | None = Query(None, description="only experiments in this state"),
    node: str | None = Query(None, description="only those on (or submitted to) this node"),
    outcome: Outcome | None = Query(None, description="only finished ones with this outcome"),
    stage: str | None = Query(None, pattern=STAGE_PATTERN, description="only the experiments of this stage"),
    q: str | None = Query(None, max_length=200, description="only those whose purpose contains this text (ASCII "
                          "letters case-insensitive), searched among a bounded window of the newest "
                          "candidates (AJET_RUNNER_SEARCH_WINDOW, default 1000): `search` says which, and "
                          "the scan_before of the next window"),
    scan_before: str | None = Query(None, pattern=r"^[0-9]{1,12}(\.[0-9]{1,9})?$", description="with q: "
                                    "search the window older than this cursor (a previous page's "
                                    "search.next_scan_before)"),
    limit: int = Query(100, ge=1, le=1000),
    offset: int = Query(0, ge=0, le=MAX_OFFSET),
    be: Backend = Depends(backend),
) -> dict[str, Any]:
    """Newest first. `total` counts every match, so a client can page with `offset`. Every filter, alone or
    combined, is read from indexes (a page costs the page, not the number of records)."""
    query = ListQuery(state.value if state else "", node or "", outcome.value if outcome else "", stage or "")
    return list_page(be.store, query, offset, limit, q=q or "", scan_before=scan_before or "",
                     window=be.settings.search_window)


@router.get("/experiments/{exp_id}", response_model=ExperimentView, responses=NOT_FOUND)
def get_experiment(exp_id: str, be: Backend = Depends(backend)) -> dict[str, Any]:
    return view_dict(_record(be, exp_id))


@router.post("/experiments/{exp_id}/stop", response_model=ExperimentView,
             responses={**NOT_FOUND, 202: {"model": ExperimentView, "description": "stop requested; the driver stops "
                                           "and collects it"},
                        **error_responses(409, *BODY_ERRORS, notes={409: "already finished"})})
def stop(exp_id: str, response: Response, be: Backend = Depends(backend)) -> dict[str, Any]:
    """Queued: removed from its queue and finished as cancelled now (200). Otherwise: graceful stop (202)."""
    from ajet_runner.service.stop import AlreadyFinished, ExperimentNotFound, StopFailed, stop_experiment

    try:
        result = stop_experiment(be.store, exp_id, be.settings)
    except ExperimentNotFound as exc:
        raise not_found(exp_id) from exc
    except AlreadyFinished as exc:
        raise HTTPException(status.HTTP_409_CONFLICT,
                            f"experiment {exp_id} is already finished ({exc.record.outcome})") from exc
    except StopFailed as exc:
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, str(exc)) from exc
    if result.record is None:
        raise not_found(exp_id)  # deleted meanwhile
    response.status_code = status.HTTP_200_OK if result.finished else status.HTTP_202_ACCEPTED
    return view_dict(result.record)


@router.delete("/experiments/{exp_id}", response_model=DeleteResult,
               responses={**NOT_FOUND, **error_responses(*BODY_ERRORS),
                          202: {"model": DeleteResult, "description": "being stopped; the record is dropped once it "
                                                                      "is finished"}})
def delete(exp_id: str, response: Response, be: Backend = Depends(backend)) -> dict[str, Any]:
    """Drop the record (stopping it first if needed). Result files are never deleted."""
    from ajet_runner.service.stop import ExperimentNotFound, StopFailed, stop_experiment

    try:
        result = stop_experiment(be.store, exp_id, be.settings, delete=True)
    except ExperimentNotFound as exc:
        raise not_found(exp_id) from exc
    except StopFailed as exc:
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, str(exc)) from exc
    rec = result.record or {}
    response.status_code = status.HTTP_200_OK if result.deleted else status.HTTP_202_ACCEPTED
    return {"id": exp_id, "deleted": result.deleted, "state": rec.get("state"), "outcome": rec.get("outcome") or None}


def _inside(path: str, root: str) -> bool:
    real, base = os.path.realpath(path), os.path.realpath(root)
    return bool(root) and (real == base or real.startswith(base.rstrip("/") + "/"))


def _tail(path: str, lines: int) -> tuple[str, int]:
    """The last `lines` lines of a file, read backwards in blocks; and the file size."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        data, pos = b"", size
        while pos > 0 and data.count(b"\n") <= lines and len(data) < 16 * MAX_LOG_CHUNK:
            step = min(64 * 1024, pos)
            pos -= step
            fh.seek(pos)
            data = fh.read(step) + data
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:]), size


def _since(path: str, offset: int, whole: bool) -> tuple[str, int]:
    """What was appended after byte `offset`, whole lines only unless `whole` (the run is over)."""
    with open(path, "rb") as fh:
        size = fh.seek(0, os.SEEK_END)
        if offset > size:
            offset = 0  # truncated or replaced: start over
        fh.seek(offset)
        data = fh.read(MAX_LOG_CHUNK)
    if not whole and len(data) and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        data = data[:cut]
    return data.decode("utf-8", errors="replace").rstrip("\n"), offset + len(data)


@router.get("/experiments/{exp_id}/log", response_class=PlainTextResponse, responses=NOT_FOUND)
def log(
    exp_id: str,
    tail: int = Query(200, ge=1, le=100_000, description="the last N lines"),
    since: int | None = Query(None, ge=0, le=MAX_BYTE_OFFSET,
                              description="byte offset: what was written after it (to follow)"),
    raw: bool = Query(False, description="keep colour codes and Ray prefixes"),
    be: Backend = Depends(backend),
) -> PlainTextResponse:
    """The latest attempt's log: from its file when this server can read it, else the tail kept in Redis.

    Headers: X-Log-Source (file or redis), X-Log-Path (percent-encoded), X-Log-Offset (pass as `since` to follow),
    X-Experiment-State.
    """
    from ajet_runner.statemachine.logs.text import clean_lines

    rec = _record(be, exp_id)
    path = _log_path(rec)
    headers = {"X-Experiment-State": str(rec.get("state", "")), "X-Log-Path": quote(path, safe="/")}
    text = _file_text(rec, path, since, tail, headers)
    if text is None:
        lines = be.store.log_tail.read(exp_id, max(1, tail))
        text = "\n".join(lines[-tail:])
        headers.update({"X-Log-Source": "redis", "X-Log-Offset": ""})
    elif not raw and text:
        text = "\n".join(clean_lines(text.split("\n")))
    return PlainTextResponse(text + ("\n" if text else ""), headers=headers)


def _log_path(rec: dict[str, Any]) -> str:
    """The latest attempt's log file ("" before the first launch)."""
    attempts = (rec.get("ctx") or {}).get("attempts") or []
    return str(attempts[-1].get("log_path") or "") if attempts else ""


def _file_text(rec: dict[str, Any], path: str, since: int | None, tail: int, headers: dict[str, str]) -> str | None:
    """The log read from its file (after `since`, else its last `tail` lines), the headers saying so; None when
    this server cannot read it (no file, outside the result dir, unreadable)."""
    if not path or not _inside(path, str(rec.get("result_dir") or "")):
        return None
    finished = rec.get("state") == State.finished.value
    try:
        text, offset = _since(path, since, finished) if since is not None else _tail(path, tail)
    except OSError:
        return None
    headers.update({"X-Log-Source": "file", "X-Log-Offset": str(offset)})
    return text


nodes_router = APIRouter(prefix="/v1", tags=["nodes"], responses=error_responses(401, 503))


@nodes_router.get("/nodes", response_model=list[NodeView])
def nodes(be: Backend = Depends(backend)) -> list[dict[str, Any]]:
    """Every node that sent a heartbeat recently: GPUs, busy GPUs, slots, its running experiments."""

    now = time.time()
    return [node_dict(n, now, NODE_ALIVE_SECONDS) for n in be.store.nodes.all()]

