"""Abuse limits: per IP and per email, shared by every instance through PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.db import Database
from tenantd.ops.config import MAIL_RATE_LIMITS, RateLimitSettings
from tenantd.ops.ratelimit import (
    client_ip,
    counters_for,
    enforce,
    ip_key,
    limit_chosen_recipient,
)
from tenantd.settings import Settings, validated
from tenantd.web.schemas import RequestBody
from tenantd.web.spec import Access, Routes

probe = Routes("test")


class EmailBody(RequestBody):
    email: str
    password: str = ""


@probe.post("/test/limited", access=Access.PUBLIC, body=EmailBody, rate_limit="login")
async def limited(request: web.Request, body: EmailBody) -> dict[str, bool]:
    return {"ok": True}


@probe.post("/test/ip-only", access=Access.PUBLIC, rate_limit="register")
async def ip_only(request: web.Request) -> dict[str, bool]:
    return {"ok": True}


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env.update(
        {
            "RATE_LIMIT_LOGIN_PER_IP": "5",
            "RATE_LIMIT_LOGIN_PER_EMAIL": "3",
            "RATE_LIMIT_LOGIN_WINDOW_SECONDS": "600",
            "RATE_LIMIT_REGISTER_PER_IP": "2",
            "RATE_LIMIT_REGISTER_PER_EMAIL": "0",
            "TENANTD_TRUSTED_PROXIES": "10.9.0.0/16",
        }
    )
    return env


Clients = tuple[TestClient[Any, Any], TestClient[Any, Any]]


@pytest.fixture
async def two_instances(
    db: Database, settings: Settings, migrated: str, aiohttp_client: Any
) -> Clients:
    """Two applications (two pools) on one database, as two `tenantd serve` would be."""
    first = await aiohttp_client(TestServer(create_app(settings, migrated, extra_routes=[probe])))
    second = await aiohttp_client(TestServer(create_app(settings, migrated, extra_routes=[probe])))
    return first, second


Post = Callable[..., Awaitable[Any]]


async def status_of(client: TestClient[Any, Any], email: str, **headers: str) -> int:
    response = await client.post(
        "/test/limited", json={"email": email, "password": "x"}, headers=headers
    )
    await response.read()
    return response.status


async def test_per_email_limit_holds_across_instances(two_instances: Clients, db: Database) -> None:
    a, b = two_instances
    statuses = [await status_of(c, "Victim@Example.com") for c in (a, b, a)]
    assert statuses == [200, 200, 200]
    refused = await b.post("/test/limited", json={"email": "victim@example.com"})
    assert refused.status == 429
    body = await refused.json()
    assert body["error"]["code"] == "RATE_LIMITED"
    retry_after = int(refused.headers["Retry-After"])
    assert 1 <= retry_after <= 600
    assert body["error"]["details"]["retryAfter"] == retry_after
    # Another address from the same IP still gets through (until the IP limit of 5).
    assert await status_of(a, "other@example.com") == 200
    # The stored key never holds the address itself.
    keys = [r["key"] for r in await db.fetch_all("SELECT key FROM rate_limits")]
    assert not any("example.com" in key for key in keys)
    assert any(key.startswith("login:email:") for key in keys)


async def test_per_ip_limit_is_exact_under_concurrency(two_instances: Clients) -> None:
    a, b = two_instances
    results = await asyncio.gather(
        *(status_of(a if i % 2 else b, f"user{i}@example.com") for i in range(20))
    )
    assert sorted(results) == [200] * 5 + [429] * 15


async def test_new_window_allows_again(two_instances: Clients, db: Database) -> None:
    a, _ = two_instances
    for _ in range(3):
        assert await status_of(a, "again@example.com") == 200
    assert await status_of(a, "again@example.com") == 429
    await db.execute("UPDATE rate_limits SET window_start = window_start - interval '1 hour'")
    assert await status_of(a, "again@example.com") == 200
    assert await db.fetch_val("SELECT max(count) FROM rate_limits") == 1


async def test_route_without_email_is_limited_per_ip(two_instances: Clients) -> None:
    a, b = two_instances
    statuses = []
    for client in (a, b, a):
        response = await client.post("/test/ip-only")
        statuses.append(response.status)
    assert statuses == [200, 200, 429]


async def test_forwarded_for_counts_only_behind_a_trusted_proxy(two_instances: Clients) -> None:
    a, _ = two_instances
    # The test client connects from 127.0.0.1, which is not a trusted proxy: a forged
    # X-Forwarded-For does not buy a fresh per-IP budget.
    for i in range(5):
        assert await status_of(a, f"f{i}@example.com", **{"X-Forwarded-For": f"1.1.1.{i}"}) == 200
    assert await status_of(a, "f9@example.com", **{"X-Forwarded-For": "1.1.1.9"}) == 429


def test_client_ip_resolution() -> None:
    trusted = validated(
        RateLimitSettings, {"TENANTD_TRUSTED_PROXIES": "10.0.0.0/8,::1"}
    ).trusted_proxies
    assert client_ip("10.0.0.5", "203.0.113.7", trusted) == "203.0.113.7"
    # Right-most untrusted hop wins: the client cannot prepend its own choice.
    assert client_ip("10.0.0.5", "6.6.6.6, 203.0.113.7, 10.0.0.9", trusted) == "203.0.113.7"
    assert client_ip("198.51.100.1", "203.0.113.7", trusted) == "198.51.100.1"
    assert client_ip("::1", "garbage", trusted) == "::1"
    assert client_ip("10.0.0.5", None, trusted) == "10.0.0.5"


async def test_auth_routes_declare_their_scopes(app: web.Application) -> None:
    from tenantd.web.routing import ROUTE_SPEC

    scopes = {spec.path: spec.rate_limit for spec in app[ROUTE_SPEC] if spec.rate_limit}
    assert scopes == {
        "/auth/register": "register",
        "/api/v1/auth/login": "login",
        "/api/v1/auth/resend-verification": "resend_verification",
        "/api/v1/auth/password-reset/request": "password_reset",
        "/api/v1/auth/password": "login",
        # Sign-in by email (issue 29): codes mailed, codes tried (per IP and per address).
        "/api/v1/auth/email-code": "email_code",
        "/api/v1/auth/email-code/verify": "email_code_verify",
        # MFA (issue 17): the second step of a sign-in, reauthentication and passkey
        # sign-in count per IP (the unlisted scope's default, 100 per 15 minutes).
        "/api/v1/auth/mfa/verify": "mfa",
        "/api/v1/auth/reauth": "mfa",
        "/api/v1/auth/passkeys/authenticate/verify": "mfa",
        # /api/v1/auth/passkeys/authenticate/options counts in its view: with a ticket in
        # "mfa", without (passwordless, every /login load) in "passkey_sign_in_options".
    }


async def test_login_is_rate_limited_per_email(client: TestClient[Any, Any], factory: Any) -> None:
    user = await factory.user()
    statuses = []
    for _ in range(4):
        response = await client.post(
            "/api/v1/auth/login", json={"email": user.email, "password": "wrong password!"}
        )
        statuses.append(response.status)
    assert statuses == [401, 401, 401, 429]


def test_ip_key_groups_ipv6_by_its_64() -> None:
    assert ip_key("2001:db8:1:2:aaaa::1") == ip_key("2001:db8:1:2:ffff:ffff:ffff:ffff")
    assert ip_key("2001:db8:1:2::1") == "2001:db8:1:2::/64"
    assert ip_key("2001:db8:1:2::1") != ip_key("2001:db8:1:3::1")
    # An IPv4 client seen through an IPv6 socket is that IPv4 client.
    assert ip_key("::ffff:198.51.100.7") == ip_key("198.51.100.7") == "198.51.100.7"
    assert ip_key("198.51.100.7") != ip_key("198.51.100.8")
    assert ip_key("fe80::1%eth0") == "fe80::/64"
    rule = RateLimitSettings().rule("login")
    keys = [c.key for c in counters_for("login", rule, ip="2001:db8:1:2::99", email_hash=None)]
    assert keys == ["login:ip:2001:db8:1:2::/64"]


@pytest.fixture
async def behind_proxy(
    db: Database, env: dict[str, str], migrated: str, aiohttp_client: Any
) -> TestClient[Any, Any]:
    """The app behind a trusted local proxy, so X-Forwarded-For names the client."""
    settings = load_settings(environ={**env, "TENANTD_TRUSTED_PROXIES": "127.0.0.0/8,::1"})
    app = create_app(settings, migrated, extra_routes=[probe])
    client: TestClient[Any, Any] = await aiohttp_client(TestServer(app))
    return client


async def test_ipv6_clients_share_the_limit_of_their_64(behind_proxy: TestClient[Any, Any]) -> None:
    async def status_from(address: str) -> int:
        response = await behind_proxy.post("/test/ip-only", headers={"X-Forwarded-For": address})
        await response.read()
        return response.status

    # RATE_LIMIT_REGISTER_PER_IP is 2: a third address of the same /64 is over it.
    assert await status_from("2001:db8:7:1::1") == 200
    assert await status_from("2001:db8:7:1:dead:beef:0:2") == 200
    assert await status_from("2001:db8:7:1:ffff::3") == 429
    assert await status_from("2001:db8:7:2::1") == 200  # the next /64 is someone else
    assert await status_from("198.51.100.7") == 200
    assert await status_from("::ffff:198.51.100.7") == 200
    assert await status_from("198.51.100.7") == 429


async def test_limits_off_count_nothing_from_either_entry(db: Database) -> None:
    """RATE_LIMIT_ENABLED=false: no counter row, no refusal, past every limit."""
    config = validated(
        RateLimitSettings, {"RATE_LIMIT_ENABLED": "false", "RATE_LIMIT_LOGIN_PER_EMAIL": "1"}
    )
    user = uuid.uuid4()
    async with db.connection() as conn:
        for _ in range(3):
            await enforce(
                conn, config, secret_key="k", scope="login", ip="10.0.0.1", email="a@example.com"
            )
            await limit_chosen_recipient(
                conn,
                config,
                secret_key="k",
                scope=next(iter(MAIL_RATE_LIMITS)),
                user_id=user,
                recipient="b@example.com",
            )
        assert await conn.fetch_val("SELECT count(*) FROM rate_limits") == 0
