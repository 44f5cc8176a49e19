"""docs/cross-origin.md's settings (`same-origin-env`, `sibling-env`) as written: they load,
and an app built with them answers the page origins of that deployment as the page says."""

from __future__ import annotations

from typing import Any

import pytest

from tests.docs.snippets import snippet
from tests.factories import Factory


def settings_of(name: str) -> dict[str, str]:
    values = {}
    for line in snippet(name).code.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            values[key] = value
    return values


@pytest.fixture(params=["same-origin-env", "sibling-env"])
def deployment(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def env(env: dict[str, str], deployment: str) -> dict[str, str]:
    env.pop("ALLOWED_ORIGINS", None)
    env.update(settings_of(deployment))
    env["COOKIE_SECURE"] = "false"  # the test client speaks plain http
    env.pop("TENANTD_TRUSTED_PROXIES", None)
    return env


async def test_the_documented_settings_answer_the_app_origin(
    deployment: str, make_client: Any, factory: Factory
) -> None:
    user = await factory.user()
    cross = await make_client(origin="https://app.example.com")
    cross.session.cookie_jar.update_cookies(
        await factory.cookies(user), response_url=cross.make_url("/")
    )
    response = await cross.get("/api/v1/users/me")
    allowed = response.headers.get("Access-Control-Allow-Origin")
    if deployment == "sibling-env":
        assert allowed == "https://app.example.com"
        assert response.headers["Access-Control-Allow-Credentials"] == "true"
    else:
        assert allowed is None  # one origin: nothing else is let in
    same = await make_client(origin=settings_of(deployment)["PUBLIC_BASE_URL"])
    assert (await same.get("/api/v1/users/me")).status == 200


def test_the_sibling_settings_share_only_the_access_cookie() -> None:
    from tenantd.app.settings import load_settings

    loaded = load_settings(environ={"SECRET_KEY": "x" * 40, **settings_of("sibling-env")})
    assert loaded.web.session_cookie_domain == "example.com"
    assert "https://app.example.com" in loaded.web.allowed_origins
    same = load_settings(environ={"SECRET_KEY": "x" * 40, **settings_of("same-origin-env")})
    assert same.web.session_cookie_domain is None
    assert same.web.allowed_origins == ("https://example.com",)
