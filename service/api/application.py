"""The HTTP API (FastAPI): one authenticated entry point to submit, inspect, follow and stop experiments.

`create_app()` builds the app from settings; `ajet-runner serve` runs it with uvicorn. Every
route under /v1 needs a bearer token; /healthz, /readyz and /metrics do not (probes and
Prometheus scrapes). Request latency per route template and the API's own `process_*` metrics go to
`HTTP_REGISTRY`, which the /metrics endpoint includes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Security
from fastapi.responses import JSONResponse, Response

from ajet_runner.service.api.auth import BearerAuth, TokenSet, bearer_scheme
from ajet_runner.service.api.backend import Backend
from ajet_runner.service.api.errors import error_responses, install_handlers, install_openapi
from ajet_runner.service.api.hosts import TrustedHosts, allowed_hosts
from ajet_runner.service.api.http_metrics import HTTP_LATENCY, HTTP_REGISTRY
from ajet_runner.service.api.middleware import BodyLimit, Latency, SecurityHeaders
from ajet_runner.store.settings import Settings, get_settings

log = logging.getLogger(__name__)
__all__ = ["HTTP_LATENCY", "HTTP_REGISTRY", "create_app"]



def _install_probes(app: FastAPI, be: Backend, metrics_guard: list[Any]) -> None:
    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers (touches no Redis)."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {"description": "Redis is unreachable", "content": {
        "application/json": {"schema": {"type": "object", "properties": {"status": {"type": "string"},
                                                                         "detail": {"type": "string"}}}}}}})
    def readyz() -> JSONResponse:
        """Readiness: Redis answers a PING."""
        try:
            be.store.ping()
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready"
            detail = getattr(exc, "detail", None) or type(exc).__name__
            return JSONResponse(status_code=503, content={"status": "unavailable", "detail": f"redis: {detail}"})
        return JSONResponse({"status": "ready"})

    @app.get("/metrics", tags=["health"], dependencies=metrics_guard, response_class=Response, responses={
        200: {"description": "Prometheus text exposition", "content": {"text/plain": {"schema": {"type": "string"}}}},
        **(error_responses(401) if metrics_guard else {})})
    def metrics() -> Response:
        """Prometheus exposition: experiment and node metrics from Redis, plus this API's request latency."""
        try:
            from ajet_runner.service.cluster_metrics import metrics_response
        except ImportError:
            return Response("metrics not available\n", status_code=503, media_type="text/plain")
        body, content_type = metrics_response(be.store)
        return Response(body, media_type=content_type)


def _warm_metrics(be: Backend) -> None:
    from ajet_runner.service.cluster_metrics import warm_up

    try:
        store = be.store
    except Exception as exc:  # noqa: BLE001 - Redis not reachable yet: the first scrape pays instead
        log.debug("metrics warm-up skipped: %s", exc)
        return
    warm_up(store)


def trusted_proxies(value: str) -> list[str] | None:
    """AJET_RUNNER_TRUST_PROXY as uvicorn's trusted hosts (None: not set)."""
    value = value.strip()
    if not value or value.lower() in ("0", "false", "no", "off"):
        return None
    if value.lower() in ("*", "1", "true", "yes", "on"):
        return ["*"]
    return [p.strip() for p in value.split(",") if p.strip()]


def create_app(settings: Settings | None = None, *, insecure: bool = False, port: int | None = None,
               bind: str = "", local: bool = False) -> FastAPI:
    """The API app. Without any token configured, /v1 answers 401 unless `insecure` (loopback only: `serve`
    checks that). `port` and `bind`: where it is served, for the Host names an open API answers
    (service/api/hosts.py; HostsError for an allowed-hosts setting it cannot honour). `local` (`up`: served on
    loopback for the user at this machine) answers the loopback names only, as an open API does, token or not:
    /metrics needs no token, so a rebinding page must not reach it either."""
    from ajet_runner.service.api.event_routes import router as events_router
    from ajet_runner.service.api.experiments import nodes_router
    from ajet_runner.service.api.experiments import router as experiments_router
    from ajet_runner.service.api.notification_routes import router as notifications_router
    from ajet_runner.service.api.stage_routes import router as stages_router

    settings = settings or get_settings()
    be = Backend(settings)
    tokens = TokenSet.from_settings(settings)
    hosts = allowed_hosts(settings.allowed_hosts, open_api=local or (insecure and not tokens.configured), port=port,
                          bound=bind)
    metrics_auth = bool(getattr(settings, "metrics_auth", False))
    guard = [Security(bearer_scheme)]  # documents the scheme; BearerAuth enforces it

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.redis_url or settings.redis_sentinels:
            threading.Thread(target=_warm_metrics, args=(be,), name="metrics-warm-up", daemon=True).start()
        yield
        await be.close()

    app = FastAPI(
        title="ajet-runner", version="0.1.0", lifespan=lifespan,
        docs_url=None, redoc_url=None,  # served offline, from bundled assets, by service/ui/docs.py
        description="Submit AgentJet experiment blueprints, follow them, stop them. "
                    "Every /v1 route needs `Authorization: Bearer <token>`.",
    )
    app.state.backend = be
    app.state.tokens = tokens
    install_handlers(app)
    install_openapi(app)
    _install_probes(app, be, guard if metrics_auth else [])
    for router in (experiments_router, events_router, nodes_router, stages_router, notifications_router):
        app.include_router(router, dependencies=guard)
    from ajet_runner.service.ui import install_ui

    install_ui(app, settings, tokens, insecure=insecure)  # the web console under /ui/ (its own auth: cookie or bearer)
    app.add_middleware(BodyLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(BearerAuth, tokens=tokens, insecure=insecure,  # before the body is read
                       prefixes=("/v1", "/metrics") if metrics_auth else ("/v1",))
    app.add_middleware(Latency, histogram=HTTP_LATENCY)  # a 401 or 413 is timed too
    app.add_middleware(SecurityHeaders)  # every route's answer, /docs and /redoc and the 401s included
    proxies = trusted_proxies(getattr(settings, "trust_proxy", ""))
    if proxies is not None:  # the scheme (hence Secure cookies) and client as the proxy saw them
        from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

        app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=proxies)
    app.add_middleware(TrustedHosts, hosts=hosts)  # first in the stack: a foreign Host is 400 before anything runs
    app.state.allowed_hosts = hosts
    return app
