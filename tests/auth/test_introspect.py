"""POST /api/v1/auth/introspect: the principal cache's answer for server callers, admitted by
an API key with scope sessions:introspect or by address (TENANTD_INTROSPECT_ALLOWED_IPS)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tenantd.apikeys.service import create_key
from tenantd.cache.invalidation import CHANNEL
from tenantd.db import Database
from tenantd.pubsub.hub import PUBSUB
from tests.factories import wait_until_heard
from tests.helpers import SECRET, access_claims, error_of

INTROSPECT = "/api/v1/auth/introspect"


@pytest.fixture
def allowed() -> str:
    return "127.0.0.0/8, ::1"


@pytest.fixture
def env(env: dict[str, str], allowed: str) -> dict[str, str]:
    env["TENANTD_INTROSPECT_ALLOWED_IPS"] = allowed
    return env


async def introspect(client: Any, token: str, **headers: str) -> Any:
    response = await client.post(INTROSPECT, json={"token": token}, headers=headers)
    body = await response.json()
    assert response.status == 200, body
    return body


async def test_a_live_token_is_active_with_its_claims(make_client: Any, factory: Any) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    server = await make_client(origin=None)  # a server caller: no cookie, no Origin
    body = await introspect(server, cookies["auth_token"])
    claims = access_claims(server, cookies["auth_token"])
    assert body == {
        "active": True,
        "sub": str(user.id),
        "aid": str(user.account_id),
        "sid": str(claims.session_id),
        "exp": int(claims.expires_at),
    }
    assert body["exp"] > time.time()


async def test_a_logged_out_sessions_token_is_inactive_at_once(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    server = await make_client(origin=None)
    assert (await introspect(server, cookies["auth_token"]))["active"] is True  # now cached
    browser = await make_client(cookies=cookies)
    # A refresh, then logout with the new token: the first token's session ends too (sid).
    assert (await browser.post("/api/v1/auth/refresh")).status == 200
    assert (await browser.post("/api/v1/auth/logout")).status == 200
    assert await introspect(server, cookies["auth_token"]) == {"active": False}


async def test_a_token_owing_its_accounts_second_factor_is_inactive(
    make_client: Any, factory: Any, db: Database, app: Any
) -> None:
    """Once its account requires MFA, a token of a session that used no factor is refused by
    every route but step-up, enrolment and leaving: not active for a server caller either."""
    user = await factory.user()
    cookies = await factory.cookies(user)
    server = await make_client(origin=None)
    assert (await introspect(server, cookies["auth_token"]))["active"] is True  # now cached
    await db.execute(
        "UPDATE accounts SET require_mfa = true WHERE id = %(a)s", {"a": user.account_id}
    )
    await wait_until_heard(db, app[PUBSUB], CHANNEL)  # the account's invalidation arrived
    assert await introspect(server, cookies["auth_token"]) == {"active": False}


async def test_logout_everywhere_and_hostile_tokens_are_inactive(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    server = await make_client(origin=None)
    token = cookies["auth_token"]
    header, payload, signature = token.split(".")
    for hostile in ("garbage", f"{header}.{payload}.{signature[:-4]}AAAA", "a.b.c", "x" * 3000):
        assert await introspect(server, hostile) == {"active": False}, hostile
    browser = await make_client(cookies=cookies)
    assert (await browser.post("/api/v1/auth/logout-all")).status == 200
    assert await introspect(server, token) == {"active": False}


@pytest.mark.parametrize("allowed", ["10.0.0.0/8"])
async def test_a_caller_outside_the_allowlist_is_refused(
    allowed: str, make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    server = await make_client(origin=None)
    for headers in ({}, {"X-Forwarded-For": "10.1.2.3"}):  # no trusted proxy: not believed
        response = await server.post(
            INTROSPECT, json={"token": cookies["auth_token"]}, headers=headers
        )
        assert response.status == 401
        assert error_of(await response.json())["details"]["reason"] == "missing_api_key"
    # A browser session is no admission either.
    browser = await make_client(cookies=cookies)
    response = await browser.post(INTROSPECT, json={"token": cookies["auth_token"]})
    assert response.status == 401


@pytest.mark.parametrize("allowed", [""])
async def test_no_allowlist_refuses_everyone(allowed: str, make_client: Any) -> None:
    server = await make_client(origin=None)
    response = await server.post(INTROSPECT, json={"token": "x"})
    assert response.status == 401


async def test_the_body_is_validated(make_client: Any) -> None:
    server = await make_client(origin=None)
    response = await server.post(INTROSPECT, json={"token": ""})
    assert response.status == 422
    response = await server.post(INTROSPECT, json={"token": "x", "extra": 1})
    assert response.status == 422


async def api_key(db: Database, *scopes: str) -> str:
    async with db.connection() as conn:
        created = await create_key(conn, secret_key=SECRET, name="verifier", scopes=list(scopes))
    return created.token


@pytest.mark.parametrize("allowed", [""])
async def test_an_api_key_with_the_scope_admits_from_anywhere(
    allowed: str, make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    token = (await factory.cookies(user))["auth_token"]
    server = await make_client(origin=None)
    key = await api_key(db, "sessions:introspect")
    body = await introspect(server, token, Authorization=f"Bearer {key}")
    assert body["active"] is True and body["sub"] == str(user.id)

    other = await api_key(db, "events:read")
    response = await server.post(
        INTROSPECT, json={"token": token}, headers={"Authorization": f"Bearer {other}"}
    )
    assert response.status == 403
    assert (await response.json())["error"]["code"] == "INSUFFICIENT_SCOPE"
    for bad in (f"Bearer {key}x", "Bearer tdk_nope", f"Basic {key}"):
        response = await server.post(
            INTROSPECT, json={"token": token}, headers={"Authorization": bad}
        )
        assert response.status == 401, bad
        assert error_of(await response.json())["details"]["reason"] == "invalid_api_key"
