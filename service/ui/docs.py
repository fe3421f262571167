"""`/docs` (Swagger UI) and `/redoc` (ReDoc) from bundled assets: they work on an offline cluster.

FastAPI's own docs pages load Swagger UI, ReDoc and fonts from CDNs and start them with an inline script,
which the console's Content-Security-Policy forbids. Here the assets come from the `fastapi-offline` wheel
(served under /docs/assets/), a small script of ours starts Swagger UI, and every URL is relative so a
path prefix in front of the API keeps working. /docs has the console's CSP exactly (service/api/middleware.py).
ReDoc cannot run under it: its bundle inserts <style> elements before any nonce can reach it, draws icons
from data: images and searches in a blob: worker. So /redoc's CSP allows exactly those three, and keeps the
rest, scripts included (`script-src 'self'`: no inline script, no eval); the page shows only our own OpenAPI
document. ReDoc's footer logo, which it links from its CDN, stays refused (img-src has no other host).
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, FastAPI, HTTPException, status
from fastapi.responses import HTMLResponse, Response

from ajet_runner.service.api.middleware import CSP

router = APIRouter(include_in_schema=False)

ASSETS = {  # name -> (package, media type)
    "swagger-ui-bundle.js": ("fastapi_offline", "text/javascript; charset=utf-8"),
    "swagger-ui.css": ("fastapi_offline", "text/css; charset=utf-8"),
    "redoc.standalone.js": ("fastapi_offline", "text/javascript; charset=utf-8"),
    "favicon.png": ("fastapi_offline", "image/png"),
    "swagger-init.js": ("ajet_runner.service.ui", "text/javascript; charset=utf-8"),
    "redoc-init.js": ("ajet_runner.service.ui", "text/javascript; charset=utf-8"),
    "docs.css": ("ajet_runner.service.ui", "text/css; charset=utf-8"),
}


def _page(title: str, body: str, styles: tuple[str, ...], scripts: tuple[str, ...],
          headers: dict[str, str] | None = None) -> HTMLResponse:
    links = "".join(f'<link rel="stylesheet" href="docs/assets/{s}">' for s in styles)
    tags = "".join(f'<script src="docs/assets/{s}"></script>' for s in scripts)
    return HTMLResponse(f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
                        '<meta name="viewport" content="width=device-width, initial-scale=1">'
                        f'<link rel="icon" href="docs/assets/favicon.png">{links}</head>'
                        f"<body>{body}{tags}</body></html>", headers=headers)


@router.get("/docs")
def swagger_ui() -> HTMLResponse:
    return _page("ajet-runner API - Swagger UI", '<div id="swagger-ui" data-url="openapi.json"></div>',
                 ("swagger-ui.css", "docs.css"), ("swagger-ui-bundle.js", "swagger-init.js"))


REDOC_CSP = (CSP.replace("style-src 'self'", "style-src 'self' 'unsafe-inline'")
             .replace("img-src 'self'", "img-src 'self' data:") + "; worker-src 'self' blob:")


@router.get("/redoc")
def redoc() -> HTMLResponse:
    return _page("ajet-runner API - ReDoc", '<div id="redoc" data-url="openapi.json"></div>', ("docs.css",),
                 ("redoc.standalone.js", "redoc-init.js"), headers={"Content-Security-Policy": REDOC_CSP})


@router.get("/docs/assets/{name}")
def asset(name: str) -> Response:
    if name not in ASSETS:
        raise HTTPException(status.HTTP_404_NOT_FOUND, "no such file")
    package, media_type = ASSETS[name]
    folder = resources.files(package).joinpath("static")
    return Response(folder.joinpath(name).read_bytes(), media_type=media_type,
                    headers={"Cache-Control": "public, max-age=86400"})


def install_docs(app: FastAPI) -> None:
    """Serve the API docs pages (the app is built with docs_url=None, redoc_url=None)."""
    app.include_router(router)
