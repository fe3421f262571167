"""One error shape for every error the API sends, and an OpenAPI document that says so."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.integration.test_api import api, auth, settings  # noqa: F401 - fixtures

pytestmark = [pytest.mark.integration]


def _shape(resp) -> dict:  # type: ignore[no-untyped-def]
    assert resp.headers["content-type"].startswith("application/json"), resp.headers
    body = resp.json()
    assert set(body) == {"detail", "problems"} and isinstance(body["detail"], str), body
    return body


def test_every_error_has_detail_and_problems(api: TestClient) -> None:  # noqa: F811
    assert _shape(api.get("/v1/experiments"))["problems"] == []  # 401
    assert api.get("/v1/experiments").headers["www-authenticate"].startswith("Bearer")
    bad = api.post("/v1/experiments", content=b'{"blueprint": "\xff\xfe"}', headers={
        **auth(), "Content-Type": "application/json"})
    assert bad.status_code in (400, 422)
    assert _shape(bad)["problems"][0]["field"] == "body"
    assert _shape(api.get("/v1/experiments/nope", headers=auth())).get("problems") == []  # 404
    assert _shape(api.get("/v1/experiments/nope/log", headers=auth()))["detail"].startswith("no experiment")
    assert _shape(api.post("/v1/experiments", json={"blueprint": "x" * 60_000}, headers=auth()))["problems"]  # 413
    invalid = api.get("/v1/experiments", params={"limit": 0}, headers=auth())
    assert invalid.status_code == 422 and _shape(invalid)["problems"][0]["field"] == "limit"
    not_allowed = api.request("PATCH", "/v1/experiments/abc", headers=auth())
    assert not_allowed.status_code == 405 and _shape(not_allowed)
    assert set(not_allowed.headers["allow"].split(", ")) == {"GET", "DELETE"}


def test_openapi_documents_what_is_sent(api: TestClient) -> None:  # noqa: F811
    doc = api.get("/openapi.json").json()
    ref = {"$ref": "#/components/schemas/ErrorBody"}
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    for path, ops in doc["paths"].items():
        if not path.startswith("/v1"):
            continue
        for method, op in ops.items():
            takes_input = op.get("parameters") or op.get("requestBody")
            for code in ("401", "503", *(("422",) if takes_input else ())):
                assert op["responses"][code]["content"]["application/json"]["schema"] == ref, (path, method, code)
            if method in ("post", "delete"):
                assert {"400", "413"} <= set(op["responses"]), (path, method)
    log_404 = doc["paths"]["/v1/experiments/{exp_id}/log"]["get"]["responses"]["404"]["content"]
    assert list(log_404) == ["application/json"]
    assert "text/plain" in doc["paths"]["/v1/experiments/{exp_id}/log"]["get"]["responses"]["200"]["content"]
    submit = doc["paths"]["/v1/experiments"]["post"]
    assert any(p["name"] == "idempotency-key" for p in submit["parameters"]) and "200" in submit["responses"]
