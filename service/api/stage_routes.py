"""/v1/stages: submit a set of blueprints (or a sweep) as one stage, list stages, add to one, compare one."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter

from ajet_runner.service.api.backend import Backend, backend
from ajet_runner.service.api.errors import BODY_ERRORS, V1_ERRORS, error_body, error_responses
from ajet_runner.service.api.schemas import SUMMARY_FIELDS, summary_dict
from ajet_runner.service.api.stage_schemas import (
    StageAddRequest,
    StageSubmitRequest,
    StageSubmitView,
    StageSummary,
    StageView,
)
from ajet_runner.statemachine.blueprint.sweep import MAX_EXPERIMENTS
from ajet_runner.statemachine.blueprint.webhook_url import webhook_url_problem
from ajet_runner.statemachine.comparison.compare import DEFAULT_METRIC, ExperimentFacts, compare
from ajet_runner.statemachine.lifecycle import FINISHED, SUCCEEDED
from ajet_runner.store.cluster.stage_idempotency import StageClaim
from ajet_runner.store.cluster.stages import (
    drop_if_empty,
    evaluation_events,
    forget_members,
    stage_counts,
    stage_ids,
    stage_meta,
    stage_names,
)
from ajet_runner.store.per_experiment.idempotency import KEY_PATTERN as IDEMPOTENCY_KEY_PATTERN
from ajet_runner.store.store import Store

if TYPE_CHECKING:
    from ajet_runner.service.stage_submit import StageSubmission

router = APIRouter(prefix="/v1", tags=["stages"], responses=error_responses(*V1_ERRORS))
_FACTS: TypeAdapter[list[ExperimentFacts]] = TypeAdapter(list[ExperimentFacts])
NOT_FOUND = error_responses(404, notes={404: "no stage with that name"})


def _records(store: Store, ids: list[str], fields: tuple[str, ...] = SUMMARY_FIELDS) -> list[dict[str, Any]]:
    return store.records.partial(ids, [*fields, "best_metrics"])


def _best(records: list[dict[str, Any]], metric: str = DEFAULT_METRIC) -> dict[str, Any] | None:
    """The best value of `metric` any experiment reached (its report's best; a running one's latest)."""
    found: dict[str, Any] | None = None
    for rec in records:
        value, step = _value_and_step(rec, metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                found is None or value > found["value"]):
            found = {"metric": metric, "id": rec["id"], "value": float(value), "step": step}
    return found


def _value_and_step(rec: dict[str, Any], metric: str) -> tuple[Any, Any]:
    """The experiment's best value of `metric` and its step (its report's best; a running one's latest)."""
    best = (rec.get("best_metrics") or {}).get(metric) if isinstance(rec.get("best_metrics"), dict) else None
    if isinstance(best, dict):
        return best.get("value"), best.get("step")
    latest = rec.get("latest_metrics") or {}
    return latest.get(metric), latest.get("step")


def stage_summary(store: Store, name: str, with_experiments: bool = False) -> dict[str, Any] | None:
    """The stage's summary (and its experiments' summaries), or None when there is no such stage."""
    ids = stage_ids(store, name)
    if not ids:
        drop_if_empty(store, name)  # a stage left by older versions (refused, or its records expired)
        return None
    meta = stage_meta(store, name)
    records = _records(store, ids)
    if len(records) < len(ids):  # records that expired after the retention time leave the index
        forget_members(store, name, set(ids) - {r["id"] for r in records})
    out = _summary(name, meta, records)
    if with_experiments:
        now = time.time()
        out["experiments"] = [summary_dict(r, now) for r in records]
    return out


def _summary(name: str, meta: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The stage's facts, its counts by state and outcome, whether it is finished and succeeded, its best."""
    finished = bool(records) and all(r.get("state") == FINISHED for r in records)
    return {
        "name": name, "created_at": float(meta["created_at"]) if meta.get("created_at") else None,
        "dir": meta.get("dir", ""), "webhook": bool(meta.get("webhook_url")), "total": len(records),
        **stage_counts(records),
        "finished": finished, "succeeded": finished and all(r.get("outcome") in SUCCEEDED for r in records),
        "best": _best(records), "report": meta.get("report_written") or None,
    }


@router.post("/stages", status_code=201, response_model=StageSubmitView, responses={
    200: {"model": StageSubmitView, "description": "a repeated Idempotency-Key with the same body: the first "
          "submission's stage, its experiments as they are now"},
    **error_responses(409, *BODY_ERRORS, notes={
        409: "no experiment could be placed (result dirs taken, not enough GPUs on any live node), or the "
             "Idempotency-Key was used for another request (another body, or an experiment)",
        422: "a blueprint or the sweep is malformed, or two experiments would share a result dir: nothing was "
             "submitted; each problem's field names the blueprint"})})
def create_stage(body: StageSubmitRequest, response: Response, be: Backend = Depends(backend),
                 idempotency_key: str | None = Header(None, pattern=IDEMPOTENCY_KEY_PATTERN, description=(
                     "names this submission: a repeat with the same body answers 200 with the same stage, never "
                     "a second run of it; with another body 409"))) -> Any:
    """Submit blueprints as one stage; a blueprint with an `[exp_sweep]` part (or the `sweep` field) becomes
    one experiment per combination. 201 when at least one experiment was submitted (`refused` lists the
    others). A submission refused whole records nothing: no stage, no settings."""
    from ajet_runner.store.cluster.stage_idempotency import claim_stage, first_answer
    from ajet_runner.store.per_experiment.idempotency import IdempotencyConflict

    allow_http = be.settings.webhook_allow_http
    problem = webhook_url_problem(body.webhook_url, allow_http=allow_http) if body.webhook_url else ""
    if problem:  # before anything is written or claimed (statemachine/blueprint/webhook_url.py)
        return JSONResponse(status_code=422, content=error_body(f"stage {body.stage} rejected: webhook_url {problem}", [
            {"level": "error", "field": "webhook_url", "message": f"the webhook URL {problem}"}]))
    claim: StageClaim | None = None
    try:
        while idempotency_key:
            claim = claim_stage(be.store, idempotency_key, body.stage, body.model_dump(mode="json"))
            if claim.fresh:
                break
            answer = first_answer(be.store, idempotency_key, claim)
            if answer is not None:
                response.status_code = status.HTTP_200_OK
                response.headers["Location"] = f"/v1/stages/{body.stage}"
                return _repeated(be.store, answer)
    except IdempotencyConflict as exc:
        return JSONResponse(status_code=409, content=error_body(str(exc), [
            {"level": "error", "field": "Idempotency-Key", "message": str(exc)}]))
    return _submit_stage(body, response, be, idempotency_key, claim)


def _submit_stage(body: StageSubmitRequest, response: Response, be: Backend, key: str | None,
                  claim: StageClaim | None) -> Any:
    """The submission itself; with a claimed key, its answer recorded (or the claim released when refused)."""
    from ajet_runner.service.stage_submit import StageRejected

    try:
        result = _submit(be, body)
    except StageRejected as exc:
        _release(be.store, key, claim)
        why = "; ".join(f"{p.field}: {p.message}" for p in exc.problems)
        return JSONResponse(status_code=exc.status, content=error_body(
            f"stage {body.stage} rejected: {why}", [p.model_dump(mode="json") for p in exc.problems]))
    except BaseException:
        _release(be.store, key, claim)
        raise
    if key and claim is not None:
        _complete(be.store, key, claim, result)
    response.headers["Location"] = f"/v1/stages/{body.stage}"
    now = time.time()
    return {"stage": result.stage, "stage_dir": result.stage_dir,
            "experiments": [summary_dict(r, now) for r in result.accepted], "refused": result.refused}


def _submit(be: Backend, body: StageSubmitRequest) -> StageSubmission:
    """The request's stage submitted (raises StageRejected when it is refused whole)."""
    from ajet_runner.service.stage_submit import submit_stage

    return submit_stage(be.store, body.stage,
                        [(b.blueprint, b.blueprint_path or "") for b in body.blueprints], sweep=body.sweep,
                        stage_dir=body.stage_dir or "", webhook_url=body.webhook_url or "", node=body.node,
                        priority=body.priority, allowed_roots=be.allowed_roots,
                        check_disk=be.settings.submit_check_disk, wait_for_node=body.wait_for_node,
                        max_experiments=body.max_experiments or MAX_EXPERIMENTS)


def _complete(store: Store, key: str, claim: StageClaim, result: StageSubmission) -> None:
    """The claimed key's answer: what a repeat of this submission is told (the ids, not the records)."""
    from ajet_runner.store.cluster.stage_idempotency import complete_stage

    complete_stage(store, key, claim, {"stage": result.stage, "stage_dir": result.stage_dir,
                                       "ids": [r["id"] for r in result.accepted], "refused": result.refused})


def _release(store: Store, key: str | None, claim: StageClaim | None) -> None:
    """A refused or failed submission gives its Idempotency-Key back."""
    from ajet_runner.store.cluster.stage_idempotency import release_stage

    if key and claim is not None:
        release_stage(store, key, claim)


def _repeated(store: Store, answer: dict[str, Any]) -> dict[str, Any]:
    """The first submission's answer, its experiments as they are now (those whose records still exist)."""
    now = time.time()
    records = store.records.partial([str(i) for i in answer.get("ids") or []], [*SUMMARY_FIELDS])
    return {"stage": answer.get("stage", ""), "stage_dir": answer.get("stage_dir", ""),
            "experiments": [summary_dict(r, now) for r in records], "refused": answer.get("refused") or []}


@router.get("/stages", response_model=list[StageSummary])
def list_stages(be: Backend = Depends(backend)) -> list[dict[str, Any]]:
    """Every stage, newest first, with counts by state and outcome."""
    return [s for name in stage_names(be.store) if (s := stage_summary(be.store, name)) is not None]


@router.get("/stages/{name}", response_model=StageView, responses=NOT_FOUND)
def get_stage(name: str, be: Backend = Depends(backend)) -> dict[str, Any]:
    found = stage_summary(be.store, name, with_experiments=True)
    if found is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no stage named {name!r}")
    return found


def _resolve_dir(store: Store, result_dir: str) -> str | None:
    """The experiment last run in `result_dir`: the id its results.json names (if that record exists), else
    the newest record whose result dir is that dir."""
    from ajet_runner.resultdir.stage_inputs import read_facts

    facts = read_facts(result_dir)
    if facts is not None and store.records.exists(facts.id):
        return facts.id
    real = os.path.realpath(result_dir)
    recs = store.records.fields_of(store.indexes.ids(0, 1_000_000), ("result_dir",))
    return next((r["id"] for r in recs if r["result_dir"] and os.path.realpath(r["result_dir"]) == real), None)


def _dir_problem(result_dir: str, roots: Sequence[str]) -> str:
    """Why this server may not read `result_dir`'s results.json ('' when it may): it must be absolute and,
    with AJET_RUNNER_ALLOWED_ROOTS set, inside one of them (as every submitted result dir is)."""
    if not os.path.isabs(result_dir):
        return "a result dir must be an absolute path"
    real = os.path.realpath(result_dir)
    if roots and not any(real == os.path.realpath(r) or real.startswith(os.path.realpath(r).rstrip("/") + "/")
                         for r in roots):
        return (f"outside the allowed roots ({', '.join(roots)}): only a result dir inside them is read "
                "(AJET_RUNNER_ALLOWED_ROOTS)")
    return ""


@router.post("/stages/{name}/experiments", response_model=StageView, responses={
    **error_responses(*BODY_ERRORS, notes={422: "an id or result dir names no experiment, a result dir is outside "
                                                "the allowed roots or holds a control character (nothing was "
                                                "added)"})})
def add_to_stage(name: str, body: StageAddRequest, be: Backend = Depends(backend)) -> Any:
    """Put existing experiments into a stage after the fact (by id, or by a result dir they ran in). A stage
    whose experiments are then all finished gets its report and `stage_finished` webhook."""
    from ajet_runner.store.cluster.stages import StageNameError, add_to_stage, check_stage_name

    try:
        check_stage_name(name)
    except StageNameError as exc:
        return JSONResponse(status_code=422, content=error_body(str(exc), [
            {"level": "error", "field": "name", "message": str(exc)}]))
    found, problems = _ids_of_dirs(be, body.result_dirs)
    ids = [*body.ids, *found]
    missing = [i for i in ids if not be.store.records.exists(i)]
    problems += [{"level": "error", "field": "ids", "message": f"no experiment with id {i!r}"} for i in missing]
    if problems or not ids:
        detail = "; ".join(p["message"] for p in problems) or "give at least one id or result dir"
        return JSONResponse(status_code=422, content=error_body(f"nothing added to stage {name}: {detail}",
                                                                problems))
    add_to_stage(be.store, name, list(dict.fromkeys(ids)))
    be.store.outbox().check_stage(name)  # all finished already: the stage's report and webhook are due
    return stage_summary(be.store, name, with_experiments=True)


def _ids_of_dirs(be: Backend, result_dirs: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The experiment each result dir names, and a problem for each dir that names none or may not be read."""
    ids: list[str] = []
    problems: list[dict[str, Any]] = []
    for d in result_dirs:
        if why := _dir_problem(d, be.allowed_roots):
            problems.append({"level": "error", "field": "result_dirs", "message": f"{d}: {why}"})
            continue
        found = _resolve_dir(be.store, d)
        if found is None:
            problems.append({"level": "error", "field": "result_dirs", "message": (
                f"{d}: no experiment recorded for this result dir (not run by this runner, or its record expired)")})
        else:
            ids.append(found)
    return ids, problems


def stage_facts(be: Backend, name: str) -> list[ExperimentFacts]:
    """Each experiment of the stage as the comparison reads it (results.json where this server sees it)."""
    from ajet_runner.resultdir.stage_inputs import facts_for

    ids = stage_ids(be.store, name)
    records = be.store.records.all(ids)
    return facts_for(records, lambda exp_id: evaluation_events(be.store, exp_id),
                     read_files=be.settings.submit_check_disk)


@router.get("/stages/{name}/facts", response_model=list[dict[str, Any]], responses=NOT_FOUND)
async def get_stage_facts(name: str, be: Backend = Depends(backend)) -> Response:
    """What the comparison reads of each experiment (statemachine/comparison/compare.py ExperimentFacts), in submission
    order: from its results.json when this server can read it, else from its record and evaluation events."""
    if stage_summary(be.store, name) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no stage named {name!r}")
    facts = await run_in_threadpool(stage_facts, be, name)
    return Response(_FACTS.dump_json(facts), media_type="application/json")


@router.get("/stages/{name}/comparison", response_model=dict[str, Any], responses=NOT_FOUND)
async def get_stage_comparison(name: str, metric: str = Query(DEFAULT_METRIC, max_length=200),
                               be: Backend = Depends(backend)) -> Response:
    """The stage compared (what `ajet-runner compare` writes as stage_results.json): rows, what differs,
    rankings by `metric` (final and best), repeats' spread, curves."""
    if stage_summary(be.store, name) is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no stage named {name!r}")
    body = await run_in_threadpool(lambda: compare(name, stage_facts(be, name), metric).model_dump_json())
    # The JSON as pydantic writes it: decoding it to re-encode it through the response model cost a second at
    # 200 runs (bench/bench_stage.py).
    return Response(body, media_type="application/json")
