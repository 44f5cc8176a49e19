"""Generic HTTP layer fixes found by fuzzing: Allow on 405, the parser's own 400 documented."""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient


async def test_405_allow_lists_the_paths_own_methods(client: TestClient[Any, Any]) -> None:
    # /api/v1/accounts/switch (POST) also matches /api/v1/accounts/{id} (GET, PATCH, DELETE).
    response = await client.put("/api/v1/accounts/switch")
    assert response.status == 405
    assert response.headers["Allow"] == "POST"
    assert (await response.json())["error"]["code"] == "METHOD_NOT_ALLOWED"
    templated = await client.put("/api/v1/accounts/0b7c6f1e-0000-4000-8000-000000000000")
    assert templated.status == 405
    assert templated.headers["Allow"] == "DELETE, GET, PATCH"


async def test_overlong_request_line_is_documented(client: TestClient[Any, Any]) -> None:
    response = await client.get("/healthz?pad=" + "x" * 9000)
    assert response.status == 400
    document = await (await client.get("/api/v1/openapi.json")).json()
    for path_item in document["paths"].values():
        for operation in path_item.values():
            # A route answering its own protocol's errors (SCIM) documents that type too.
            assert set(operation["responses"]["400"]["content"]) - {"application/scim+json"} == {
                "application/json",
                "text/plain",
            }


async def test_every_answer_is_enveloped_without_an_aiohttp_middleware(
    client: TestClient[Any, Any],
) -> None:
    # The envelope runs inside each route's handler (issue 19: no per-request middleware
    # chain), and unmatched requests still get it: the error body, the request id, the log.
    assert not client.app.middlewares
    for path in ("/no/such/path", "/api/v1/nope", "/api/v1/users/me/nope"):
        response = await client.get(path, headers={"X-Request-ID": "req-404"})
        assert response.status == 404, path
        assert response.headers["X-Request-ID"] == "req-404"
        body = await response.json()
        assert body == {
            "success": False,
            "error": {"code": "NOT_FOUND", "message": body["error"]["message"]},
        }
    generated = await client.delete("/api/v1/auth/refresh")
    assert generated.status == 405
    assert generated.headers["Allow"] == "POST"
    assert len(generated.headers["X-Request-ID"]) == 32
    assert (await generated.json())["error"]["code"] == "METHOD_NOT_ALLOWED"
    ok = await client.get("/healthz", headers={"X-Request-ID": "req-ok"})
    assert ok.status == 200
    assert ok.headers["X-Request-ID"] == "req-ok"
