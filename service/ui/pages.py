"""The console's routes: login, experiments, one experiment, submit, nodes, and the fragments pages refresh."""

from __future__ import annotations

import os
import re
import shlex
import time
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from ajet_runner.service.api.backend import Backend, backend
from ajet_runner.service.api.schemas import node_dict, stream_id_problem, view_dict
from ajet_runner.service.ui import console_data as data
from ajet_runner.service.ui import html as render
from ajet_runner.service.ui.session import COOKIE, Sessions, Viewer, check_origin, safe_next
from ajet_runner.service.ui.streams import follow, last_id
from ajet_runner.statemachine.lifecycle import Outcome, State
from ajet_runner.store.store import GLOBAL_STREAM, NODE_ALIVE_SECONDS, exp_key, stream_key

router = APIRouter(prefix="/ui", include_in_schema=False)
STATIC = {"app.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]?")

env = Environment(loader=PackageLoader("ajet_runner.service.ui", "templates"),
                  autoescape=select_autoescape(default=True), trim_blocks=True, lstrip_blocks=True)
env.globals.update(states=[s.value for s in State], outcomes=[o.value for o in Outcome], render=render,
                   quote=lambda s: quote(str(s), safe=""))
env.filters.update(duration=render.duration, limit=render.limit, age=render.age, clock=render.clock,
                   number=render.number)


def sessions(request: Request) -> Sessions:
    return request.app.state.ui_sessions


def viewer(request: Request) -> Viewer:
    """Every route but login and the static login stylesheet depends on this."""
    return sessions(request).viewer(request)


def page(name: str, request: Request, who: Viewer | None, status_code: int = 200, **ctx: Any) -> HTMLResponse:
    html = env.get_template(name).render(request=request, viewer=who, csrf=who.csrf() if who else "", **ctx)
    return HTMLResponse(html, status_code=status_code)


def fragment(name: str, **ctx: Any) -> str:
    return env.get_template(name).render(**ctx)


async def form(request: Request) -> dict[str, str]:
    """An urlencoded form body (the console's forms post nothing else), first value of each field."""
    body = await request.body()
    if body and not request.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
        raise HTTPException(status.HTTP_415_UNSUPPORTED_MEDIA_TYPE, "forms must be application/x-www-form-urlencoded")
    parsed = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    return {k: v[0] for k, v in parsed.items()}


def _record(be: Backend, exp_id: str) -> dict[str, Any]:
    rec = be.store.records.raw(exp_id)
    if rec is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no experiment with id {exp_id!r} (never submitted or deleted)")
    return rec


# ------------------------------------------------------------------------------------------------ login


@router.get("/login")
def login_form(request: Request, next: str = "/ui/") -> HTMLResponse:  # `next` (a builtin): the conventional name
    return page("login.html", request, None, next=safe_next(next), error="")


@router.post("/login")
async def login(request: Request) -> Response:
    check_origin(request)
    fields = await form(request)
    token, target = fields.get("token", "").strip(), safe_next(fields.get("next"))
    s = sessions(request)
    if not token or not s.tokens.current() or not s.tokens.matches(token):
        return page("login.html", request, None, status_code=401, next=target,
                    error="That token is not valid on this server.")
    resp = RedirectResponse(target, status_code=303)
    resp.set_cookie(COOKIE, s.issue(token), max_age=s.max_age, path="/ui", httponly=True, samesite="strict",
                    secure=request.url.scheme == "https")
    return resp


@router.post("/logout")
async def logout(request: Request, who: Viewer = Depends(viewer)) -> Response:
    s = sessions(request)
    s.check_csrf(request, who, (await form(request)).get("csrf", ""))
    await run_in_threadpool(s.end, who)  # revoked server-side, not only dropped from this browser
    resp = RedirectResponse("/ui/login", status_code=303)
    resp.delete_cookie(COOKIE, path="/ui", httponly=True, samesite="strict")
    return resp


@router.get("/login.css")
def login_css() -> Response:
    """The login page's own small stylesheet: part of the login page, so readable without a session."""
    body = resources.files("ajet_runner.service.ui").joinpath("static").joinpath("login.css").read_bytes()
    return Response(body, media_type="text/css; charset=utf-8", headers={"Cache-Control": "public, max-age=300"})


@router.get("/static/{name}")
def static(name: str, _: Viewer = Depends(viewer)) -> Response:
    if name not in STATIC:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such file")
    body = resources.files("ajet_runner.service.ui").joinpath("static").joinpath(name).read_bytes()
    return Response(body, media_type=STATIC[name], headers={"Cache-Control": "private, max-age=300"})


# ------------------------------------------------------------------------------------------------ experiments


_CURSOR = re.compile(r"^[0-9]{1,12}(\.[0-9]{1,9})?$")  # a search window's cursor (a created_at)


def _filters(request: Request) -> data.Filters:
    q = request.query_params
    try:
        page_no = max(1, int(q.get("page", "1")))
    except ValueError:
        page_no = 1
    state = q.get("state", "") if q.get("state", "") in {s.value for s in State} else ""
    outcome = q.get("outcome", "") if q.get("outcome", "") in {o.value for o in Outcome} else ""
    scan = q.get("scan", "") if _CURSOR.match(q.get("scan", "")) else ""
    return data.Filters(state=state, outcome=outcome, node=q.get("node", "")[:64], q=q.get("q", "")[:200],
                        page=page_no, stage=q.get("stage", "")[:64], scan=scan)


def _table(be: Backend, f: data.Filters) -> dict[str, Any]:
    result = data.experiments(be.store, f, window=be.settings.search_window)
    base = {k: v for k, v in (("state", f.state), ("outcome", f.outcome), ("node", f.node), ("q", f.q),
                              ("stage", f.stage), ("scan", f.scan if f.q else "")) if v}
    return {"result": result, "f": f, "query": lambda **kw: "?" + urlencode({**base, **kw}), "now": time.time(),
            "workers_live": bool(_live_nodes(be))}  # `up` serves before its worker joins: the page says so


@router.get("/", response_class=HTMLResponse)
async def experiments(request: Request, who: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> Response:
    f = _filters(request)
    ctx = await run_in_threadpool(_table, be, f)
    return page("experiments.html", request, who, after=await last_id(be.aio, GLOBAL_STREAM), **ctx)


@router.get("/fragments/experiments", response_class=HTMLResponse)
def experiments_fragment(request: Request, _: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> str:
    return fragment("_table.html", **_table(be, _filters(request)))


@router.get("/stream")
async def stream(after: str = "$", _: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> Response:
    start = after if stream_id_problem(after) is None else "$"
    return StreamingResponse(follow(be.aio, start), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


# ------------------------------------------------------------------------------------------------ one experiment


def _attach(rec: dict[str, Any], be: Backend) -> str:
    session = rec.get("tmux_session")
    if not session:
        return ""
    sock = f" -S {shlex.quote(be.settings.tmux_socket)}" if be.settings.tmux_socket else ""
    return f"tmux{sock} attach -t {shlex.quote(str(session))}"


def _parts(be: Backend, exp_id: str, csrf: str) -> dict[str, str]:
    rec = _record(be, exp_id)
    view = view_dict(rec)
    evals = data.evaluations(be.store, exp_id)
    report = data.result_text(rec, data.REPORT_NAME)
    repairs = data.result_text(rec, data.REPAIR_LOG_NAME)
    ctx = {"e": view, "evals": evals, "csrf": csrf, "attach": _attach(rec, be), "now": time.time(),
           "report": render.markdown(report, exp_id) if report is not None else None,
           "repairs": render.markdown(repairs, exp_id) if repairs is not None else None,
           "chart": render.chart(evals),
           "metric_keys": sorted({k for ev in evals for k in ev.metrics})}
    return {name: fragment(f"_{name}.html", **ctx) for name in ("header", "timeline", "evals", "report", "repairs")}


@router.get("/experiments/{exp_id}", response_class=HTMLResponse)
async def experiment(exp_id: str, request: Request, done: str = "", who: Viewer = Depends(viewer),
                     be: Backend = Depends(backend)) -> Response:
    after = await last_id(be.aio, stream_key(exp_id))
    parts = await run_in_threadpool(_parts, be, exp_id, who.csrf())
    notice = {"stop": "Stop requested.", "cancelled": "Cancelled.", "delete": "Delete requested: the record goes once "
              "the run is stopped."}.get(done, "")
    return page("experiment.html", request, who, exp_id=exp_id, parts=parts, after=after, notice=notice)


@router.get("/experiments/{exp_id}/parts")
def experiment_parts(exp_id: str, who: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> JSONResponse:
    return JSONResponse(_parts(be, exp_id, who.csrf()), headers={"Cache-Control": "no-store"})


@router.get("/experiments/{exp_id}/stream")
async def experiment_stream(exp_id: str, after: str = "0-0", _: Viewer = Depends(viewer),
                            be: Backend = Depends(backend)) -> Response:
    if not await be.aio.exists(exp_key(exp_id)):
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no experiment with id {exp_id!r}")
    start = after if stream_id_problem(after) is None else "0-0"
    return StreamingResponse(follow(be.aio, start, exp_id), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.get("/experiments/{exp_id}/log")
def experiment_log(exp_id: str, tail: int = 500, since: int | None = None, _: Viewer = Depends(viewer),
                   be: Backend = Depends(backend)) -> JSONResponse:
    """The API's /log (same files, same rules), as JSON for the log panel; colour codes stripped."""
    from ajet_runner.service.api.experiments import log as api_log

    resp = api_log(exp_id, tail=max(1, min(tail, 100_000)), since=since if since is None else max(0, since),
                   raw=False, be=be)
    text = _ANSI.sub("", bytes(resp.body).decode("utf-8", errors="replace"))
    offset = resp.headers.get("x-log-offset", "")
    return JSONResponse({"text": text, "offset": int(offset) if offset else None,
                         "source": resp.headers.get("x-log-source", ""),
                         "state": resp.headers.get("x-experiment-state", "")}, headers={"Cache-Control": "no-store"})


@router.get("/experiments/{exp_id}/files/{name}")
def experiment_file(exp_id: str, name: str, _: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> Response:
    rec = _record(be, exp_id)
    body = data.result_file(rec, name)
    if body is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"{name} is not in the result dir (yet)")
    media = data.SERVED_FILES[name]
    if media.startswith("text/markdown"):
        media = "text/plain; charset=utf-8"  # shown as text, never interpreted
    return Response(body, media_type=media, headers={"Cache-Control": "no-store", "Content-Disposition": "inline"})


@router.post("/experiments/{exp_id}/stop")
async def stop(exp_id: str, request: Request, who: Viewer = Depends(viewer),
               be: Backend = Depends(backend)) -> Response:
    sessions(request).check_csrf(request, who, (await form(request)).get("csrf", ""))
    from ajet_runner.service.api.experiments import stop as api_stop

    resp = Response()
    try:
        view = await run_in_threadpool(api_stop, exp_id, resp, be)
    except HTTPException as exc:
        if exc.status_code != status.HTTP_409_CONFLICT:
            raise
        view = {"outcome": ""}
    done = "cancelled" if view.get("outcome") == Outcome.cancelled.value else "stop"
    return RedirectResponse(f"/ui/experiments/{quote(exp_id, safe='')}?done={done}", status_code=303)


@router.post("/experiments/{exp_id}/delete")
async def delete(exp_id: str, request: Request, who: Viewer = Depends(viewer),
                 be: Backend = Depends(backend)) -> Response:
    sessions(request).check_csrf(request, who, (await form(request)).get("csrf", ""))
    from ajet_runner.service.api.experiments import delete as api_delete

    result = await run_in_threadpool(api_delete, exp_id, Response(), be)
    if result["deleted"]:
        return RedirectResponse("/ui/", status_code=303)
    return RedirectResponse(f"/ui/experiments/{quote(exp_id, safe='')}?done=delete", status_code=303)


# ------------------------------------------------------------------------------------------------ submit


def _live_nodes(be: Backend) -> list[str]:
    now = time.time()
    return [n["name"] for n in be.store.nodes.all() if now - float(n.get("last_seen", 0)) < NODE_ALIVE_SECONDS]


@router.get("/submit", response_class=HTMLResponse)
async def submit_form(request: Request, who: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> Response:
    nodes = await run_in_threadpool(_live_nodes, be)
    return page("submit.html", request, who, text="", node="", priority="normal", nodes=nodes, checked=None,
                rejected=None, stage=request.query_params.get("stage", "")[:64])


def _check(be: Backend, text: str) -> tuple[dict[str, Any], bool]:
    from ajet_runner.statemachine.blueprint.check_document import check_text

    doc, runnable = check_text(text, env=os.environ, check_disk=be.settings.submit_check_disk)
    bp = doc["blueprint"]
    for fld in ("exp_codebase_dir", "exp_result_dir"):  # what submit adds: the allowed roots
        value = bp.get(fld) or ""
        if value and be.allowed_roots and not any(data.inside(value, r) for r in be.allowed_roots):
            doc["problems"].append({"level": "error", "field": fld, "message": f"{value} is outside the allowed "
                                    f"roots ({', '.join(be.allowed_roots)})"})
            runnable = False
    return doc, runnable


@router.post("/submit", response_class=HTMLResponse)
async def submit(request: Request, who: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> Response:
    fields = await form(request)
    sessions(request).check_csrf(request, who, fields.get("csrf", ""))
    text = fields.get("blueprint", "").replace("\r\n", "\n")
    node = fields.get("node", "").strip() or None
    priority = fields.get("priority") if fields.get("priority") in ("normal", "high") else "normal"
    nodes = await run_in_threadpool(_live_nodes, be)
    stage = fields.get("stage", "").strip()[:64]
    ctx: dict[str, Any] = {"text": text, "node": node or "", "priority": priority, "nodes": nodes, "rejected": None,
                           "stage": stage}
    if not text.strip():
        return page("submit.html", request, who, status_code=422, checked=None,
                    rejected={"detail": "the blueprint is empty: paste it or choose a file", "problems": []}, **{
                        k: v for k, v in ctx.items() if k != "rejected"})
    checked = await run_in_threadpool(_check, be, text)
    if fields.get("action") != "submit":
        return page("submit.html", request, who, checked=checked, **ctx)
    if stage or checked[0].get("sweep"):
        return await _submit_stage(request, who, be, text, stage, checked, ctx)
    return await _submit_one(request, who, be, checked, ctx)


async def _submit_one(request: Request, who: Viewer, be: Backend, checked: tuple[dict[str, Any], bool],
                      ctx: dict[str, Any]) -> Response:
    """One experiment through the API's submit: to its page, or the form again with why it was refused."""
    from pydantic import ValidationError

    from ajet_runner.service.api.experiments import submit_blocking
    from ajet_runner.service.api.schemas import SubmitRequest

    try:
        body = SubmitRequest(blueprint=ctx["text"], node=ctx["node"] or None, priority=ctx["priority"])
    except ValidationError as exc:
        problems = [{"level": "error", "field": ".".join(str(x) for x in e["loc"]), "message": e["msg"]}
                    for e in exc.errors()]
        return page("submit.html", request, who, status_code=422, checked=checked,
                    **{**ctx, "rejected": {"detail": "invalid submission", "problems": problems}})
    result = await run_in_threadpool(submit_blocking, body, Response(), None, be)
    if isinstance(result, JSONResponse):
        import json

        rejected = json.loads(bytes(result.body))
        return page("submit.html", request, who, status_code=result.status_code, checked=checked,
                    **{**ctx, "rejected": rejected})
    return RedirectResponse(f"/ui/experiments/{quote(result['id'], safe='')}", status_code=303)


async def _submit_stage(request: Request, who: Viewer, be: Backend, text: str, stage: str,
                        checked: tuple[dict[str, Any], bool], ctx: dict[str, Any]) -> Response:
    """The submit page with a stage name (or a sweep, which needs one): POST /v1/stages's path."""
    from ajet_runner.service.stage_submit import StageRejected, submit_stage

    if not stage:
        return page("submit.html", request, who, status_code=422, checked=checked, **{**ctx, "rejected": {
            "detail": "this blueprint is a sweep: it is submitted as a stage, so give the stage a name",
            "problems": [{"level": "error", "field": "stage", "message": "a sweep needs a stage name"}]}})
    try:
        await run_in_threadpool(lambda: submit_stage(
            be.store, stage, [(text, "")], node=ctx["node"] or None, priority=ctx["priority"],
            allowed_roots=be.allowed_roots, check_disk=be.settings.submit_check_disk))
    except StageRejected as exc:
        return page("submit.html", request, who, status_code=exc.status, checked=checked, **{**ctx, "rejected": {
            "detail": f"stage {stage} rejected", "problems": [p.model_dump(mode="json") for p in exc.problems]}})
    return RedirectResponse(f"/ui/stages/{quote(stage, safe='')}", status_code=303)


# ------------------------------------------------------------------------------------------------ nodes


def _nodes(be: Backend) -> dict[str, Any]:
    now = time.time()
    return {"nodes": [node_dict(n, now, NODE_ALIVE_SECONDS) for n in be.store.nodes.all()], "now": now}


@router.get("/nodes", response_class=HTMLResponse)
async def nodes(request: Request, who: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> Response:
    return page("nodes.html", request, who, **await run_in_threadpool(_nodes, be))


@router.get("/fragments/nodes", response_class=HTMLResponse)
def nodes_fragment(_: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> str:
    return fragment("_nodes.html", **_nodes(be))
