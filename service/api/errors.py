"""One error shape for every HTTP error the API sends, and its OpenAPI documentation.

Every error body is `{"detail": str, "problems": [{"level", "field", "message"}, ...]}` (problems
may be empty) with `Content-Type: application/json` — from handlers, validation, the auth and
body-limit middleware alike — and every route documents the statuses it can really answer.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ajet_runner.service.api.schemas import ErrorBody
from ajet_runner.store.connection import NoMasterKnown
from ajet_runner.store.store import REDIS_DOWN, RedisError

log = logging.getLogger(__name__)

ERROR_REF = {"$ref": "#/components/schemas/ErrorBody"}
WHY = {
    400: "the request body cannot be read (not UTF-8, bad Content-Length)",
    401: "missing or invalid bearer token (header `WWW-Authenticate: Bearer`)",
    404: "no experiment with that id",
    409: "conflict with the experiment's state",
    413: "request body over the size limit",
    422: "invalid request: `problems` names each field",
    500: "an unexpected error (a Redis error other than a lost connection says what Redis answered)",
    503: "Redis is unreachable, no Redis master is known (a Sentinel failover; `Retry-After`), or none is configured",
}


def error_responses(*codes: int, notes: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries for these error statuses, all with the ErrorBody JSON schema;
    `notes` overrides the description of a status for one route."""
    out: dict[int | str, dict[str, Any]] = {}
    for code in codes:
        desc = (notes or {}).get(code) or WHY.get(code, "error")
        out[code] = {"description": desc, "content": {"application/json": {"schema": ERROR_REF}}}
    return out


# What every authenticated route can answer, whatever it does.
V1_ERRORS = (401, 422, 500, 503)
BODY_ERRORS = (400, 413)


def error_body(detail: str, problems: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"detail": detail, "problems": problems or []}


def _validation_problems(exc: RequestValidationError) -> list[dict[str, str]]:
    problems = []
    for err in exc.errors():
        if err.get("type") == "json_invalid":
            why = (err.get("ctx") or {}).get("error", "")
            problems.append({"level": "error", "field": "body", "message": f"invalid JSON: {why}"})
            continue
        loc = [str(x) for x in err.get("loc", ()) if x not in ("body", "query", "path", "header")]
        problems.append({"level": "error", "field": ".".join(loc) or "body", "message": str(err.get("msg", ""))})
    return problems


def _allowed_methods(request: Request) -> list[str]:
    """Every method the API document lists for this path (Starlette names only the first route's)."""
    path = request.url.path
    methods: set[str] = set()
    for template, ops in request.app.openapi().get("paths", {}).items():
        if re.fullmatch(re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(template)), path):
            methods |= {m.upper() for m in ops if m in ("get", "put", "post", "delete", "patch", "head", "options")}
    return sorted(methods)


def is_outage(exc: BaseException) -> bool:
    """A Redis error that means "cannot reach Redis" (connection refused or lost, a timeout), as opposed
    to an answer Redis gave (a range out of bounds, a wrong type, a script error)."""
    return isinstance(exc, REDIS_DOWN)


def install_handlers(app: FastAPI) -> None:
    """Validation errors, HTTPExceptions, Redis outages and other Redis errors all answer with ErrorBody."""

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = _validation_problems(exc)
        detail = "invalid request: " + "; ".join(f"{p['field']}: {p['message']}" for p in problems)
        return JSONResponse(status_code=status.HTTP_422_UNPROCESSABLE_CONTENT, content=error_body(detail, problems))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        detail = str(exc.detail)
        problems = []
        headers = dict(getattr(exc, "headers", None) or {})
        if exc.status_code == 400:  # FastAPI's "error parsing the body" (e.g. not UTF-8)
            problems = [{"level": "error", "field": "body", "message": detail}]
        if exc.status_code == 405:  # Starlette names only the first matching route's methods
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return JSONResponse(status_code=exc.status_code, content=error_body(detail, problems), headers=headers)

    @app.exception_handler(RedisError)
    async def redis_error(_: Request, exc: RedisError) -> JSONResponse:
        """Only a lost connection (or a timeout) is an outage; any other Redis error is ours (500), with
        what Redis said, e.g. a range it refused."""
        if isinstance(exc, NoMasterKnown):  # Sentinel: the client's retries outlasted the failover
            log.warning("no Redis master known: %s", exc)
            return JSONResponse(status_code=status.HTTP_503_SERVICE_UNAVAILABLE, headers={"Retry-After": "2"},
                                content=error_body("no Redis master is known (a Sentinel failover is under way, "
                                                   "or the sentinels are away): try again shortly"))
        if is_outage(exc):
            log.warning("redis unreachable: %s", exc)
            return JSONResponse(status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
                                content=error_body(f"Redis is unreachable: {type(exc).__name__}"))
        log.error("redis error: %s: %s", type(exc).__name__, exc)
        return JSONResponse(status_code=status.HTTP_500_INTERNAL_SERVER_ERROR,
                            content=error_body(f"Redis error: {type(exc).__name__}: {str(exc)[:500]}"))

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        """A bug of ours still answers in the one error shape (Starlette's own is plain text); the traceback
        goes to the log, not to the client."""
        log.error("unexpected error: %s", type(exc).__name__, exc_info=exc)
        return JSONResponse(status_code=status.HTTP_500_INTERNAL_SERVER_ERROR,
                            content=error_body(f"internal error ({type(exc).__name__}); the server's log has the "
                                               "details"))


def install_openapi(app: FastAPI) -> None:
    """The generated document, with ErrorBody (and what it refers to) always in the components."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in schema.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas.setdefault("ErrorBody", schema)
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to customise the schema
