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
            assert set(operation["responses"]["400"]["content"]) == {
                "application/json",
                "text/plain",
            }
