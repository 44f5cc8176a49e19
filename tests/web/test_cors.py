"""Credentialed CORS for the origins in ALLOWED_ORIGINS (tenantd/web/cors.py): the headers on
answers and errors, preflights, nothing for any other origin or path, and the access cookie's
SESSION_COOKIE_DOMAIN. The browser half is tests/ui/test_cross_origin.py."""

from __future__ import annotations

from typing import Any

import pytest

from tenantd.app.settings import load_settings
from tenantd.settings import SettingsError
from tenantd.web import middlewares
from tests.factories import Factory
from tests.helpers import ORIGIN, PASSWORD

APP = "https://app.example.com"
DEV = "http://localhost:5173"
OTHER = "https://evil.example.net"
CORS_HEADERS = (
    "Access-Control-Allow-Origin",
    "Access-Control-Allow-Credentials",
    "Access-Control-Allow-Methods",
    "Access-Control-Allow-Headers",
    "Access-Control-Expose-Headers",
    "Access-Control-Max-Age",
)


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    # Written as an operator might: a default port and a trailing slash (browsers send neither).
    env["ALLOWED_ORIGINS"] = f"{ORIGIN},https://APP.example.com:443,{DEV}/"
    return env


def assert_no_cors(response: Any) -> None:
    present = [name for name in CORS_HEADERS if name in response.headers]
    assert not present, dict(response.headers)


def assert_cors(response: Any, origin: str) -> None:
    assert response.headers["Access-Control-Allow-Origin"] == origin
    assert response.headers["Access-Control-Allow-Credentials"] == "true"
    assert "Origin" in [v.strip() for v in response.headers["Vary"].split(",")]
    exposed = {v.strip() for v in response.headers["Access-Control-Expose-Headers"].split(",")}
    assert {"Retry-After", "X-Request-ID"} <= exposed


async def signed_in(make_client: Any, factory: Factory, origin: str) -> Any:
    user = await factory.user()
    client = await make_client(origin=origin)
    client.session.cookie_jar.update_cookies(
        await factory.cookies(user), response_url=client.make_url("/")
    )
    return client


@pytest.mark.parametrize("origin", [APP, DEV, ORIGIN])
async def test_a_listed_origin_reads_me_with_cookies(
    make_client: Any, factory: Factory, origin: str
) -> None:
    client = await signed_in(make_client, factory, origin)
    response = await client.get("/api/v1/users/me")
    assert (await response.json())["user"] is not None
    assert_cors(response, origin)


@pytest.mark.parametrize(
    "origin",
    [
        OTHER,
        "null",
        "https://app.example.com.evil.net",
        "http://app.example.com",  # another scheme is another origin
        "https://app.example.com:8443",  # another port too
        "https://sub.app.example.com",
        "HTTPS://APP.EXAMPLE.COM",  # never sent by a browser: not matched loosely either
        "https://app.example.com/",
        "",
    ],
)
async def test_any_other_origin_gets_no_cors_headers(
    make_client: Any, factory: Factory, origin: str
) -> None:
    client = await signed_in(make_client, factory, origin)
    response = await client.get("/api/v1/users/me")
    assert response.status == 200  # the answer is sent; the browser keeps it from the page
    assert_no_cors(response)
    if origin:
        assert response.headers["Vary"] == "Origin"  # a cache must not serve it to another


async def test_errors_carry_the_headers_so_a_page_reads_the_reason(make_client: Any) -> None:
    client = await make_client(origin=APP)
    response = await client.get("/api/v1/notifications")  # no session
    assert response.status == 401
    assert_cors(response, APP)
    missing = await client.get("/api/v1/no-such-route")
    assert missing.status == 404
    assert_cors(missing, APP)


async def test_a_listed_origin_may_post_with_cookies(make_client: Any, factory: Factory) -> None:
    client = await signed_in(make_client, factory, APP)
    response = await client.post("/api/v1/auth/logout")
    assert response.status == 200, await response.text()
    assert_cors(response, APP)


@pytest.mark.parametrize(
    ("path", "method", "expected"),
    [
        ("/api/v1/users/me", "DELETE", {"GET", "DELETE"}),
        ("/api/v1/auth/login", "POST", {"POST"}),
        ("/api/v1/notifications/stream", "GET", {"GET"}),
        ("/api/v1/notifications/send", "POST", {"POST"}),
    ],
)
async def test_a_listed_origins_preflight_answers_204(
    make_client: Any, path: str, method: str, expected: set[str]
) -> None:
    client = await make_client(origin=APP)
    response = await client.options(
        path,
        headers={
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "content-type,idempotency-key,last-event-id",
        },
    )
    assert response.status == 204, await response.text()
    assert response.headers["Access-Control-Allow-Origin"] == APP
    assert response.headers["Access-Control-Allow-Credentials"] == "true"
    assert "Origin" in response.headers["Vary"]
    methods = {m.strip() for m in response.headers["Access-Control-Allow-Methods"].split(",")}
    assert expected <= methods and method in methods
    allowed = {
        h.strip().lower() for h in response.headers["Access-Control-Allow-Headers"].split(",")
    }
    assert {"content-type", "idempotency-key", "last-event-id"} <= allowed
    assert int(response.headers["Access-Control-Max-Age"]) > 0
    assert await response.read() == b""


async def test_preflights_of_other_origins_and_unknown_paths_do_not_succeed(
    make_client: Any,
) -> None:
    ask = {"Access-Control-Request-Method": "POST"}
    other = await make_client(origin=OTHER)
    refused = await other.options("/api/v1/auth/login", headers=ask)
    assert refused.status == 405
    assert_no_cors(refused)
    listed = await make_client(origin=APP)
    unknown = await listed.options("/api/v1/nothing-here", headers=ask)
    assert unknown.status == 404
    assert "Access-Control-Allow-Methods" not in unknown.headers
    # An OPTIONS without Access-Control-Request-Method is no preflight.
    plain = await listed.options("/api/v1/auth/login")
    assert plain.status == 405
    assert "Access-Control-Allow-Methods" not in plain.headers


@pytest.mark.parametrize("path", ["/.well-known/jwks.json", "/static/tenantd.js", "/auth/x"])
async def test_jwks_static_and_auth_paths_are_covered(make_client: Any, path: str) -> None:
    client = await make_client(origin=APP)
    response = await client.get(path)
    assert response.headers["Access-Control-Allow-Origin"] == APP, (response.status, path)
    assert "Origin" in response.headers["Vary"]


@pytest.mark.parametrize("path", ["/healthz", "/login", "/metrics", "/api/v1x"])
async def test_other_paths_get_no_cors_headers(make_client: Any, path: str) -> None:
    client = await make_client(origin=APP)
    response = await client.get(path)
    assert_no_cors(response)


async def test_a_request_without_origin_never_enters_the_cors_code(
    make_client: Any, factory: Factory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*_args: Any) -> None:
        raise AssertionError("cors_headers called without an Origin header")

    monkeypatch.setattr(middlewares, "cors_headers", refuse)
    client = await signed_in(make_client, factory, "")
    response = await client.get("/api/v1/users/me")
    assert (await response.json())["user"] is not None
    assert_no_cors(response)
    assert "Vary" not in response.headers


# --- SESSION_COOKIE_DOMAIN -----------------------------------------------------------------


def set_cookies(response: Any) -> dict[str, str]:
    return {v.split("=", 1)[0]: v for v in response.headers.getall("Set-Cookie")}


async def test_without_a_cookie_domain_every_cookie_is_host_only(
    make_client: Any, factory: Factory
) -> None:
    user = await factory.user(password=PASSWORD)
    client = await make_client()
    response = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": PASSWORD}
    )
    assert response.status == 200, await response.text()
    cookies = set_cookies(response)
    assert "auth_token" in cookies and "refresh_token" in cookies
    assert not any("domain=" in value.lower() for value in cookies.values()), cookies


class TestCookieDomain:
    @pytest.fixture
    def env(self, env: dict[str, str]) -> dict[str, str]:
        env["PUBLIC_BASE_URL"] = "https://auth.example.com"
        env["ALLOWED_ORIGINS"] = f"{ORIGIN},{APP}"
        env["SESSION_COOKIE_DOMAIN"] = ".Example.com"
        return env

    async def test_the_access_cookie_alone_is_shared_with_sibling_subdomains(
        self, make_client: Any, factory: Factory
    ) -> None:
        user = await factory.user(password=PASSWORD)
        client = await make_client(origin=APP)
        response = await client.post(
            "/api/v1/auth/login", json={"email": user.email, "password": PASSWORD}
        )
        assert response.status == 200, await response.text()
        assert_cors(response, APP)
        cookies = set_cookies(response)
        assert "Domain=example.com;" in cookies["auth_token"], cookies
        assert "SameSite=Lax" in cookies["auth_token"]
        assert "domain=" not in cookies["refresh_token"].lower(), cookies

        client.session.cookie_jar.update_cookies(
            await factory.cookies(user), response_url=client.make_url("/")
        )
        out = await client.post("/api/v1/auth/logout")
        assert out.status == 200, await out.text()
        cleared = set_cookies(out)
        assert "Max-Age=0" in cleared["auth_token"]
        assert "domain=example.com" in cleared["auth_token"].lower(), cleared


@pytest.mark.parametrize(
    ("domain", "ok"),
    [
        ("example.com", "example.com"),
        (".example.com", "example.com"),
        ("auth.example.com", "auth.example.com"),
        ("", None),
        ("other.com", False),
        ("xample.com", False),  # a suffix of the host, but not a parent domain
        ("com", False),
        ("app.example.com", False),  # a sibling cannot be set by auth.example.com
    ],
)
def test_the_cookie_domain_must_cover_the_public_host(domain: str, ok: str | bool | None) -> None:
    environ = {
        "SECRET_KEY": "x" * 40,
        "PUBLIC_BASE_URL": "https://auth.example.com",
        "SESSION_COOKIE_DOMAIN": domain,
    }
    if ok is False:
        with pytest.raises(SettingsError, match="SESSION_COOKIE_DOMAIN"):
            load_settings(environ=environ)
    else:
        assert load_settings(environ=environ).web.session_cookie_domain == ok


def test_allowed_origins_are_read_as_browsers_write_an_origin() -> None:
    environ = {
        "SECRET_KEY": "x" * 40,
        "PUBLIC_BASE_URL": "https://Auth.Example.com:443/base",
        "ALLOWED_ORIGINS": "https://App.example.com:443/, http://localhost:5173,http://[::1]:80",
    }
    settings = load_settings(environ=environ)
    assert settings.web.allowed_origins == (
        "https://app.example.com",
        "http://localhost:5173",
        "http://[::1]",
    )
    del environ["ALLOWED_ORIGINS"]
    assert load_settings(environ=environ).web.allowed_origins == ("https://auth.example.com",)
    for bad in ("app.example.com", "ftp://app.example.com", "https://", "https://a:99999"):
        with pytest.raises(SettingsError, match="ALLOWED_ORIGINS"):
            load_settings(environ={**environ, "ALLOWED_ORIGINS": bad})
