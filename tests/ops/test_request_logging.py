"""One structured line per request at the right level, and no secrets in any log line."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tenantd.app.factory import create_app
from tenantd.db import Database
from tenantd.logging_setup import ConsoleFormatter, JsonFormatter, redact_text
from tenantd.settings import Settings
from tenantd.web.schemas import RequestBody
from tenantd.web.spec import Access, Routes

probe = Routes("test")


class Credentials(RequestBody):
    email: str
    password: str


@probe.post("/test/explode/{id}", access=Access.PUBLIC, body=Credentials)
async def explode(request: web.Request, body: Credentials) -> None:
    raise RuntimeError("kaboom")


@probe.get("/test/missing", access=Access.PUBLIC)
async def missing(request: web.Request) -> None:
    from tenantd.errors import NotFound

    raise NotFound()


SECRET_PASSWORD = "hunter2-very-secret-PASSWORD"
SECRET_COOKIE = "refresh-cookie-value-SECRET-0001"
SECRET_QUERY = "query-token-SECRET-0002"


@pytest.fixture
async def probe_client(
    db: Database, settings: Settings, migrated: str, aiohttp_client: Any
) -> TestClient[Any, Any]:
    server = TestServer(create_app(settings, migrated, extra_routes=[probe]))
    return await aiohttp_client(server, headers={"Origin": "http://127.0.0.1:8080"})


def request_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tenantd.http" and hasattr(r, "http")]


def rendered(records: list[logging.LogRecord]) -> str:
    json_lines = [JsonFormatter().format(r) for r in records]
    console_lines = [ConsoleFormatter("%(levelname)s %(message)s").format(r) for r in records]
    return "\n".join(json_lines + console_lines)


async def test_levels_and_fields(
    probe_client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture, factory: Any
) -> None:
    caplog.set_level(logging.INFO, logger="tenantd")
    user = await factory.user()
    probe_client.session.cookie_jar.update_cookies(await factory.cookies(user))
    assert (await probe_client.get("/api/v1/users/me")).status == 200
    assert (await probe_client.get("/test/missing")).status == 404
    response = await probe_client.post(
        "/test/explode/42", json={"email": "a@example.com", "password": SECRET_PASSWORD}
    )
    assert response.status == 500
    assert "kaboom" not in await response.text()
    lines = request_records(caplog)
    assert [(r.levelno, r.http["route"], r.http["status"]) for r in lines] == [
        (logging.INFO, "/api/v1/users/me", 200),
        (logging.WARNING, "/test/missing", 404),
        (logging.ERROR, "/test/explode/{id}", 500),
    ]
    me = lines[0].http
    assert me["method"] == "GET"
    assert me["user_id"] == str(user.id)
    assert me["account_id"] == str(user.account_id)
    assert len(me["request_id"]) == 32
    assert response.headers["X-Request-ID"] == lines[2].http["request_id"]
    assert isinstance(me["duration_ms"], float)
    assert lines[1].http["error_code"] == "NOT_FOUND"
    # The traceback of the 500 is logged at error with the request id.
    crash = [r for r in caplog.records if r.getMessage() == "unhandled error"]
    assert crash and crash[0].levelno == logging.ERROR and crash[0].exc_info is not None


async def test_client_errors_warn(
    probe_client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="tenantd")
    probe_client.session.cookie_jar.update_cookies({"auth_token": "not-a-jwt"})
    assert (await probe_client.get("/api/v1/users/me")).status == 401
    bad = await probe_client.post(
        "/test/explode/1", data=b"{", headers={"Content-Type": "application/json"}
    )
    assert bad.status == 422
    levels = [(r.levelno, r.http["status"]) for r in request_records(caplog)]
    assert levels == [(logging.WARNING, 401), (logging.WARNING, 422)]


async def test_level_above_info_still_logs_errors_with_their_fields(
    probe_client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="tenantd")
    assert (await probe_client.get("/healthz")).status == 200
    assert (await probe_client.get("/test/missing")).status == 404
    [line] = request_records(caplog)
    assert (line.levelno, line.http["route"], line.http["status"]) == (
        logging.WARNING,
        "/test/missing",
        404,
    )
    assert line.http["error_code"] == "NOT_FOUND"
    assert len(line.http["request_id"]) == 32


async def test_no_secrets_reach_the_logs(
    probe_client: TestClient[Any, Any], caplog: pytest.LogCaptureFixture, factory: Any
) -> None:
    caplog.set_level(logging.DEBUG)
    user = await factory.user()
    cookies = await factory.cookies(user)
    probe_client.session.cookie_jar.update_cookies({**cookies, "refresh_token": SECRET_COOKIE})
    await probe_client.post(
        f"/test/explode/7?token={SECRET_QUERY}",
        json={"email": "a@example.com", "password": SECRET_PASSWORD},
        headers={"Authorization": f"Bearer {SECRET_QUERY}"},
    )
    await probe_client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": SECRET_PASSWORD}
    )
    await probe_client.post(f"/api/v1/auth/refresh?token={SECRET_QUERY}")
    assert request_records(caplog)
    # What our formatters emit for every record (aiohttp's test-server access log included),
    # and everything our own loggers hand over, formatted or not.
    ours = [r for r in caplog.records if r.name.startswith("tenantd")]
    everything = rendered(caplog.records) + "\n".join(
        json.dumps(r.__dict__, default=str) for r in ours
    )
    for secret in (
        SECRET_PASSWORD,
        SECRET_COOKIE,
        SECRET_QUERY,
        cookies["auth_token"],
        cookies["refresh_token"],
    ):
        assert secret not in everything


def test_formatters_scrub_secrets_that_slip_into_messages() -> None:
    jwt = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ"
    record = logging.LogRecord(
        "x", logging.WARNING, __file__, 1, "cookie auth_token=%s password=%s", (jwt, "pw1"), None
    )
    record.headers = {"Cookie": "refresh_token=abc", "Accept": "text/html"}
    record.api_key = "k-123"
    line = JsonFormatter().format(record)
    data = json.loads(line)
    assert jwt not in line and "pw1" not in line and "abc" not in line and "k-123" not in line
    assert data["headers"]["Accept"] == "text/html"
    assert data["api_key"] == "[redacted]"
    assert "pw1" not in ConsoleFormatter().format(record)
    assert redact_text("Authorization: Bearer abcdefghijkl") == "Authorization: [redacted]"
