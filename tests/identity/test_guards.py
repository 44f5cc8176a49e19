"""The guard table of SERVICE.md on requireAuth and tryAuth routes, with hostile tokens.

Run in ACCESS_TOKEN_ALG=HS256 (the compatibility mode): its hostile tokens are the HS256
ones. The asymmetric modes get theirs in tests/identity/test_signing_keys.py."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import jwt
import pytest

from tenantd.db import Database
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.tokens import issue_access_token
from tests.helpers import SECRET, error_of

REQUIRE_AUTH = [
    ("GET", "/test/required"),
    ("POST", "/api/v1/auth/logout"),
    ("POST", "/api/v1/auth/logout-all"),
]
TRY_AUTH = [
    ("GET", "/api/v1/users/me"),
    ("GET", "/api/v1/auth/mfa/status"),
    ("POST", "/api/v1/auth/refresh"),
]
ALL_GUARDED = REQUIRE_AUTH + TRY_AUTH
HS256_KEYRING = Keyring(algorithm="HS256", secret_key=SECRET)


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["ACCESS_TOKEN_ALG"] = "HS256"
    return env


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def claims_for(user: Any, **overrides: Any) -> dict[str, Any]:
    now = time.time()
    claims = {
        "sub": str(user.id),
        "aid": str(user.account_id),
        "jti": str(uuid.uuid4()),
        "iat": now,
        "exp": int(now) + 900,
        "iss": "tenantd",
    }
    claims.update(overrides)
    return claims


def hs512(claims: dict[str, Any]) -> str:
    """A correctly signed token with an algorithm the server does not accept."""
    header = b64(json.dumps({"alg": "HS512", "typ": "JWT"}).encode())
    signing_input = f"{header}.{b64(json.dumps(claims).encode())}"
    digest = hmac.new(SECRET.encode(), signing_input.encode(), hashlib.sha512).digest()
    return f"{signing_input}.{b64(digest)}"


def hostile_tokens(user: Any) -> dict[str, str]:
    good, _ = issue_access_token(HS256_KEYRING, user_id=user.id, account_id=user.account_id)
    header, payload, signature = good.split(".")
    flipped = signature[:-2] + ("AA" if signature[-2:] != "AA" else "BB")
    forged_payload = b64(json.dumps(claims_for(user, sub=str(uuid.uuid4()))).encode())
    none_header = b64(b'{"alg":"none","typ":"JWT"}')
    expired, _ = issue_access_token(
        HS256_KEYRING, user_id=user.id, account_id=user.account_id, now=time.time() - 3600
    )
    return {
        "tampered signature": f"{header}.{payload}.{flipped}",
        "tampered payload": f"{header}.{forged_payload}.{signature}",
        "expired": expired,
        "wrong issuer": jwt.encode(claims_for(user, iss="someone-else"), SECRET, "HS256"),
        "no issuer": jwt.encode(
            {k: v for k, v in claims_for(user).items() if k != "iss"}, SECRET, "HS256"
        ),
        "alg none": f"{none_header}.{b64(json.dumps(claims_for(user)).encode())}.",
        "other key": jwt.encode(claims_for(user), "another-secret-key-" + "x" * 40, "HS256"),
        "HS512 with our key": hs512(claims_for(user)),
        "garbage": "this-is-not-a-jwt",
        "empty segments": "..",
        "non-uuid subject": jwt.encode(claims_for(user, sub="admin"), SECRET, "HS256"),
        "unknown user": jwt.encode(claims_for(user, sub=str(uuid.uuid4())), SECRET, "HS256"),
    }


Send = Callable[[Any, str, str], Awaitable[Any]]


async def send(browser: Any, method: str, path: str) -> Any:
    return await browser.request(method, path)


async def assert_invalid(response: Any) -> None:
    body = await response.json()
    assert response.status == 401, body
    error = error_of(body)
    assert error["code"] == "UNAUTHORIZED"
    assert error["details"]["reason"] == "invalid_session"


async def test_no_cookie(client: Any) -> None:
    for method, path in REQUIRE_AUTH:
        response = await send(client, method, path)
        body = await response.json()
        assert response.status == 401, (path, body)
        assert error_of(body)["code"] == "UNAUTHORIZED"
        assert error_of(body)["details"]["reason"] == "missing_session"
    me = await client.get("/api/v1/users/me")
    assert me.status == 200
    assert await me.json() == {"user": None}
    mfa = await client.get("/api/v1/auth/mfa/status")
    assert mfa.status == 200
    assert (await mfa.json())["data"] == {"enabled": False}
    refresh = await client.post("/api/v1/auth/refresh")
    assert refresh.status == 200
    assert (await refresh.json())["data"] == {"user": None}


async def test_hostile_tokens_are_invalid_session_on_both_guards(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    for name, token in hostile_tokens(user).items():
        browser = await make_client(cookies={"auth_token": token})
        for method, path in ALL_GUARDED:
            response = await send(browser, method, path)
            body = await response.json()
            assert response.status == 401, (name, path, body)
            assert error_of(body)["details"]["reason"] == "invalid_session", (name, path)
            assert error_of(body)["code"] == "UNAUTHORIZED"


async def test_a_valid_cookie_runs_the_view_with_user_and_account(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    response = await browser.get("/test/required")
    assert response.status == 200
    assert (await response.json())["data"] == {
        "userId": str(user.id),
        "accountId": str(user.account_id),
    }
    assert (await (await browser.get("/api/v1/users/me")).json())["user"]["id"] == str(user.id)


async def test_revoked_jti_after_logout(make_client: Any, factory: Any) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    browser = await make_client(cookies=cookies)
    assert (await browser.post("/api/v1/auth/logout")).status == 200
    replay = await make_client(cookies={"auth_token": cookies["auth_token"]})
    for method, path in ALL_GUARDED:
        await assert_invalid(await send(replay, method, path))


async def test_cutoff_after_logout_all(make_client: Any, factory: Any) -> None:
    user = await factory.user()
    first = await factory.cookies(user)
    second = await factory.cookies(user)
    assert (await (await make_client(cookies=first)).post("/api/v1/auth/logout-all")).status == 200
    for cookies in (first, second):
        replay = await make_client(cookies={"auth_token": cookies["auth_token"]})
        for method, path in ALL_GUARDED:
            await assert_invalid(await send(replay, method, path))


@pytest.mark.parametrize("change", ["membership revoked", "account deleted", "user deleted"])
async def test_token_dies_with_its_aid_membership_or_user(
    make_client: Any, factory: Any, db: Database, change: str
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    assert (await browser.get("/test/required")).status == 200
    statements = {
        "membership revoked": "UPDATE memberships SET revoked_at = now() WHERE user_id = %(u)s",
        "account deleted": "UPDATE accounts SET deleted_at = now()",
        "user deleted": "DELETE FROM users WHERE id = %(u)s",
    }
    await db.execute(statements[change], {"u": user.id})
    # A write from another process reaches this instance's principal cache once its listener
    # hears the NOTIFY (the 100 ms bound: tests/identity/test_principal_cache.py); generous here,
    # the machine may be busy.
    deadline = time.monotonic() + 30
    while (await browser.get("/test/required")).status == 200:
        assert time.monotonic() < deadline, "stale context served on and on"
    for method, path in (("GET", "/test/required"), ("GET", "/api/v1/users/me")):
        await assert_invalid(await send(browser, method, path))


async def test_try_auth_view_without_its_null_branch_is_a_server_error(
    client: Any, make_client: Any, factory: Any
) -> None:
    response = await client.get("/test/try-no-branch")
    text = await response.text()
    assert response.status == 500
    body = await response.json()
    assert body == {
        "success": False,
        "error": {"code": "INTERNAL", "message": "Internal server error"},
    }
    for leak in ("Traceback", "AnonymousNotHandled", ".py", "current_principal"):
        assert leak not in text
    assert response.headers["X-Request-ID"]
    user = await factory.user()
    signed = await make_client(cookies=await factory.cookies(user))
    assert (await signed.get("/test/try-no-branch")).status == 200


async def test_unauthorized_answers_never_set_cookies_or_leak_the_token(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    token = hostile_tokens(user)["tampered signature"]
    browser = await make_client(cookies={"auth_token": token})
    response = await browser.get("/api/v1/users/me")
    assert response.status == 401
    assert "Set-Cookie" not in response.headers
    assert token not in await response.text()
