"""The console's stage pages: every stage (/ui/stages) and one stage (/ui/stages/{name}) — the comparison's
table (the rows of `stage_report.md`), its chart (every experiment overlaid), the ranking and what did not
succeed — built by the comparison the API serves
(statemachine/comparison/compare.py via service/api/stage_routes.py)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, HTTPException, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import HTMLResponse, Response

from ajet_runner.resultdir.palette import chart_metrics
from ajet_runner.resultdir.stage_series import stage_chart
from ajet_runner.service.api.backend import Backend, backend
from ajet_runner.service.api.stage_routes import stage_facts, stage_summary
from ajet_runner.service.ui.pages import page, viewer
from ajet_runner.service.ui.session import Viewer
from ajet_runner.service.ui.stage_chart import stage_chart_svg
from ajet_runner.statemachine.comparison.compare import DEFAULT_METRIC, StageComparison, compare
from ajet_runner.statemachine.comparison.stage_stats import short_names
from ajet_runner.store.cluster.stages import stage_names

router = APIRouter(prefix="/ui", include_in_schema=False)
CHARTS = 2  # metrics charted on the page (mean_reward first); stage_plot.png has up to four


def _stages(be: Backend) -> list[dict[str, Any]]:
    return [s for name in stage_names(be.store) if (s := stage_summary(be.store, name)) is not None]


@router.get("/stages", response_class=HTMLResponse)
async def stages(request: Request, who: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> Response:
    return page("stages.html", request, who, stages=await run_in_threadpool(_stages, be))


def _stage(be: Backend, name: str, metric: str) -> dict[str, Any]:
    summary = stage_summary(be.store, name)
    if summary is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no stage named {name!r}")
    comparison = compare(name, stage_facts(be, name), metric)
    charts = [stage_chart_svg(stage_chart(comparison, m)) for m in _charted(comparison, metric)]
    return {"s": summary, "c": comparison, "charts": charts, "metric": metric,
            "rows": {r.id: r for r in comparison.rows}, "short": short_names(comparison.differing_keys),
            "purposes": {r.id: shown_purpose(r.purpose) for r in comparison.rows}}


def _charted(comparison: StageComparison, metric: str) -> list[str]:
    """The metrics charted (those with curves, in the palette's order), the ranking metric among them."""
    curved = [m for m in comparison.metrics if comparison.curves.get(m)]
    charted = (chart_metrics(curved) or curved)[:CHARTS]
    if metric in comparison.metrics and metric not in charted:
        charted = [metric, *charted][:CHARTS]
    return charted


def shown_purpose(purpose: str) -> str:
    """A purpose's first line without the `[key=value, …] ` a sweep puts in front: the run column says that."""
    first = (purpose.strip().splitlines() or [""])[0]
    if first.startswith("[") and "] " in first:
        return first.split("] ", 1)[1] or first
    return first


@router.get("/stages/{name}", response_class=HTMLResponse)
async def stage(name: str, request: Request, metric: str = DEFAULT_METRIC, who: Viewer = Depends(viewer),
                be: Backend = Depends(backend)) -> Response:
    ctx = await run_in_threadpool(_stage, be, name, metric[:200])
    return page("stage.html", request, who, experiments_link=f"/ui/?stage={quote(name, safe='')}", **ctx)


@router.get("/notifications", response_class=HTMLResponse)
async def notifications(request: Request, who: Viewer = Depends(viewer), be: Backend = Depends(backend)) -> Response:
    """The webhooks given up on (the API's /v1/notifications/dead)."""
    from ajet_runner.service.api.notification_routes import dead_letters

    return page("notifications.html", request, who, dead=await run_in_threadpool(dead_letters, be.store, 200))
