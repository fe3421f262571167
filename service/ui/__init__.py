"""The web console under /ui/: experiments, one experiment (report, plot, repairs, live log), submit, nodes.

Server-rendered (Jinja2, autoescaped) with one small plain-JS file; no build step, no CDN. Same tokens as the
API: a login form turns a token into a signed session cookie, and `Authorization: Bearer` works too. This
package reads what the API reads (Redis records and streams, a few named result-dir files) and never imports
the worker side.
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ajet_runner.service.api.auth import BEARER, TokenSet
from ajet_runner.service.ui.session import CsrfRefused, LoginRequired, Sessions
from ajet_runner.store.cluster.sessions import Revocations
from ajet_runner.store.settings import Settings


def _wants_page(request: Request) -> bool:
    return request.method == "GET" and "text/html" in request.headers.get("accept", "")


def install_ui(app: FastAPI, settings: Settings, tokens: TokenSet, *, insecure: bool = False) -> None:
    """Mount the console on the API app: routes under /ui, `/` redirecting there, its error pages, and the
    API docs pages /docs and /redoc from bundled assets."""
    from ajet_runner.service.ui.docs import install_docs
    from ajet_runner.service.ui.pages import env, router

    revocations = Revocations(lambda: app.state.backend.store)  # logouts, seen by every replica
    app.state.ui_sessions = Sessions(tokens, insecure, max(60, int(settings.ui_session_seconds)), revocations)
    app.include_router(router)
    from ajet_runner.service.ui.stage_pages import router as stage_router

    app.include_router(stage_router)
    install_docs(app)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui/", status_code=307)

    @app.get("/favicon.ico", include_in_schema=False)
    @app.get("/ui/favicon.svg", include_in_schema=False)
    def favicon() -> Response:
        """The console's icon (an SVG, public like the login page): browsers ask /favicon.ico on every page."""
        from importlib import resources

        body = resources.files("ajet_runner.service.ui").joinpath("static").joinpath("favicon.svg").read_bytes()
        return Response(body, media_type="image/svg+xml", headers={"Cache-Control": "public, max-age=86400"})

    @app.exception_handler(LoginRequired)
    async def login_required(request: Request, exc: LoginRequired) -> Response:
        if _wants_page(request):
            target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
            from urllib.parse import quote

            return RedirectResponse(f"/ui/login?next={quote(target, safe='')}", status_code=303)
        return JSONResponse({"detail": exc.detail}, status_code=401, headers={"WWW-Authenticate": BEARER})

    @app.exception_handler(CsrfRefused)
    async def csrf_refused(_: Request, exc: CsrfRefused) -> Response:
        return HTMLResponse(env.get_template("error.html").render(title="Refused", message=str(exc), viewer=None),
                            status_code=403)

    default = app.exception_handlers.get(StarletteHTTPException)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if request.url.path.startswith("/ui/") and _wants_page(request):
            return HTMLResponse(env.get_template("error.html").render(
                title=f"Error {exc.status_code}", message=str(exc.detail), viewer=True), status_code=exc.status_code)
        if default is not None:
            got = default(request, exc)  # Starlette's handler may be sync or async
            return got if isinstance(got, Response) else await got
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

