"""Errors read as the pages' branded HTML for a person and as the JSON envelope for the APIs
(issue 28, part 8): one rule (`wants_page`: the path's prefix and the Accept header)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tests.helpers import ORIGIN

Maker = Callable[..., Awaitable[Any]]


@pytest.fixture
def make(env: dict[str, str], migrated: str, db: Any, aiohttp_client: Any) -> Maker:
    async def build(**overrides: str) -> Any:
        settings = load_settings(environ={**env, **overrides})
        return await aiohttp_client(create_app(settings, migrated), headers={"Origin": ORIGIN})

    return build


BROWSER = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
BRAND = {"TENANTD_UI_BRAND_NAME": "Acme Cloud", "TENANTD_UI_ACCENT_COLOR": "#0f766e"}


async def test_an_unknown_page_path_is_a_branded_404_page_for_a_person(make: Maker) -> None:
    client = await make(**BRAND)
    response = await client.get("/no-such-page", headers=BROWSER)
    assert response.status == 404
    assert response.content_type == "text/html"
    body = await response.text()
    assert "<h1>Page not found</h1>" in body
    assert "Acme Cloud" in body and "--accent: #0f766e;" in body  # the pages' layout
    assert response.headers["Content-Security-Policy"].startswith("default-src 'self'")
    assert response.headers["X-Request-ID"]
    # A wrong method on a page path: a page too.
    wrong = await client.delete("/login", headers=BROWSER)
    assert wrong.status == 405 and wrong.content_type == "text/html"
    assert "Allow" in wrong.headers
    # A script (no text/html in Accept) keeps the envelope on the same path.
    scripted = await client.get("/no-such-page", headers={"Accept": "application/json"})
    assert scripted.status == 404
    assert (await scripted.json())["error"]["code"] == "NOT_FOUND"


JSON_PATHS = [
    "/api/v1/nope",
    "/api",
    "/auth/nope",
    "/.well-known/nope",
    "/scim/v2",
    "/sso/start-nope",
    "/static/missing.css",
    "/healthz/x",
]


@pytest.mark.parametrize("path", JSON_PATHS)
async def test_api_paths_answer_json_even_to_a_browser(make: Maker, path: str) -> None:
    client = await make()
    response = await client.get(path, headers=BROWSER)
    assert response.status == 404
    assert response.content_type == "application/json"
    assert (await response.json())["error"]["code"] == "NOT_FOUND"


async def test_a_page_that_breaks_is_a_500_page_with_a_reference(
    make: Maker, tmp_path: Path, caplog: Any
) -> None:
    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "login.html").write_text("{{ no_such_variable.attribute }}")  # fails to render
    client = await make(TENANTD_UI_TEMPLATES_DIR=str(folder), **BRAND)
    response = await client.get("/login", headers=BROWSER)
    assert response.status == 500
    assert response.content_type == "text/html"
    body = await response.text()
    assert "Something went wrong" in body and "Acme Cloud" in body
    assert response.headers["X-Request-ID"] in body  # the reference to quote
    assert "no_such_variable" not in body  # nothing of the fault leaks into the page
    api = await client.get("/login", headers={"Accept": "application/json"})
    assert api.status == 500 and (await api.json())["error"]["code"] == "INTERNAL"


async def test_with_the_pages_off_every_error_is_json(make: Maker) -> None:
    client = await make(TENANTD_UI="false")
    response = await client.get("/no-such-page", headers=BROWSER)
    assert response.status == 404
    assert (await response.json())["error"]["code"] == "NOT_FOUND"


async def test_a_page_error_is_a_page(make: Maker) -> None:
    """A page's own error (a form posted without its token) reads in the same layout."""
    client = await make(**BRAND)
    response = await client.post("/login", data={"email": "x"}, headers=BROWSER)
    assert response.status == 403 and response.content_type == "text/html"
    assert "Acme Cloud" in await response.text()
