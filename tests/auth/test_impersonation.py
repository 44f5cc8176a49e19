"""Impersonation (issue 28 part 4): `POST /api/v1/admin/users/{id}/impersonate {reason}`
answers a one-time, short-lived link; its session carries the `act` claim, lasts 15 minutes
at most, cannot refresh, is refused every sensitive action (403 IMPERSONATION, in the API and
on the hosted pages), shows a banner on every page, and is audited with its reason."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest

from tenantd.auth.admin import service as admin
from tenantd.db import Database
from tenantd.identity.tokens import token_hash
from tests.apikeys.helpers import bearer, new_key
from tests.auth.helpers import set_cookies
from tests.factories import Factory, UserRecord
from tests.helpers import ORIGIN, SECRET, data, error

USERS = "/api/v1/admin/users"
REASON = "ticket 4711: cannot see invoices"


@pytest.fixture
async def key(db: Database) -> Any:
    return await new_key(db, "users:manage", name="support")


async def link_for(client: Any, key: Any, user: UserRecord, reason: str = REASON) -> str:
    answer = await data(
        await client.post(
            f"{USERS}/{user.id}/impersonate", json={"reason": reason}, headers=bearer(key.token)
        )
    )
    url: str = answer["url"]
    return url


def token_of(url: str) -> str:
    parts = urlsplit(url)
    assert f"{parts.scheme}://{parts.netloc}" == ORIGIN and parts.path == "/impersonate"
    return parse_qs(parts.query)["token"][0]


async def open_link(make_client: Any, url: str) -> tuple[Any, Any]:
    """A fresh browser opens the link; (browser, the answer without following it)."""
    browser = await make_client()
    parts = urlsplit(url)
    response = await browser.get(f"{parts.path}?{parts.query}", allow_redirects=False)
    return browser, response


def access_token(browser: Any) -> str:
    cookie = browser.session.cookie_jar.filter_cookies(browser.make_url("/")).get("auth_token")
    assert cookie is not None, "no auth_token cookie"
    return str(cookie.value)


async def impersonating(make_client: Any, client: Any, key: Any, user: UserRecord) -> Any:
    browser, response = await open_link(make_client, await link_for(client, key, user))
    assert response.status == 303, await response.text()
    return browser


async def test_link_signs_in_once_with_an_act_claim_and_no_refresh(
    client: Any, make_client: Any, factory: Factory, key: Any, db: Database
) -> None:
    user = await factory.user()
    url = await link_for(client, key, user)
    token = token_of(url)
    # Hashed at rest, short-lived.
    row = await db.fetch_one("SELECT * FROM impersonation_links")
    assert row is not None and row["user_id"] == user.id and row["reason"] == REASON
    assert bytes(row["token_hash"]) == token_hash(SECRET, "impersonate:" + token)
    assert token not in repr(dict(row))
    assert row["expires_at"] - row["created_at"] <= admin.IMPERSONATION_LINK_TTL

    browser, response = await open_link(make_client, url)
    assert response.status == 303 and response.headers["Location"] == "/"
    cookies = set_cookies(response)
    assert cookies["auth_token"]["value"]
    assert "refresh_token" not in cookies or cookies["refresh_token"]["value"] in ("", '""')
    claims = jwt.decode(access_token(browser), options={"verify_signature": False})
    assert claims["sub"] == str(user.id)
    assert claims["act"] == {"sub": f"apikey:{key.id}"}
    assert claims["exp"] - claims["iat"] <= 15 * 60 and claims["exp"] <= time.time() + 15 * 60
    assert claims["aid"] == str(user.account_id)
    me = await browser.get("/api/v1/users/me")
    assert me.status == 200 and (await me.json())["user"]["id"] == str(user.id)

    # No refresh: the refresh route answers 401, with or without the link's cookies.
    await error(await browser.post("/api/v1/auth/refresh"), 401)

    # Single use: the same link again signs in nobody.
    _, second = await open_link(make_client, url)
    assert second.status == 422
    assert "auth_token" not in set_cookies(second)
    session = await db.fetch_one(
        "SELECT s.expires_at, s.method, a.act FROM sessions s"
        " JOIN session_auth a ON a.family_id = s.family_id WHERE s.user_id = %(u)s",
        {"u": user.id},
    )
    assert session["method"] == "impersonation" and session["act"] == f"apikey:{key.id}"
    assert session["expires_at"].timestamp() <= time.time() + 15 * 60


async def test_two_browsers_racing_for_one_link_get_one_session(
    client: Any, make_client: Any, factory: Factory, key: Any, db: Database
) -> None:
    user = await factory.user()
    url = await link_for(client, key, user)
    results = await asyncio.gather(*(open_link(make_client, url) for _ in range(4)))
    statuses = sorted(response.status for _, response in results)
    assert statuses == [303, 422, 422, 422]
    count = await db.fetch_val(
        "SELECT count(*) FROM sessions WHERE user_id = %(u)s AND method = 'impersonation'",
        {"u": user.id},
    )
    assert count == 1


async def test_an_expired_link_is_refused(
    client: Any, make_client: Any, factory: Factory, key: Any, db: Database
) -> None:
    user = await factory.user()
    url = await link_for(client, key, user)
    await db.execute(
        "UPDATE impersonation_links SET expires_at = now() - interval '1 second'"
        " WHERE user_id = %(u)s",
        {"u": user.id},
    )
    _, response = await open_link(make_client, url)
    assert response.status == 422
    assert "auth_token" not in set_cookies(response)
    _, bogus = await open_link(make_client, f"{ORIGIN}/impersonate?token={uuid.uuid4().hex}")
    assert bogus.status == 422


async def test_every_sensitive_action_is_refused_through_the_api(
    client: Any, make_client: Any, factory: Factory, key: Any, db: Database
) -> None:
    user = await factory.user()
    browser = await impersonating(make_client, client, key, user)
    for method, path, body in [
        ("POST", "/api/v1/auth/mfa/totp/setup", None),
        ("POST", "/api/v1/auth/mfa/recovery-codes/regenerate", None),
        ("POST", "/api/v1/auth/passkeys/register/options", None),
        (
            "POST",
            "/api/v1/auth/password",
            {"currentPassword": user.password, "newPassword": "x" * 20},
        ),
        ("POST", "/api/v1/users/me/email", {"newEmail": "elsewhere@example.com"}),
        ("DELETE", "/api/v1/users/me", None),
        ("DELETE", f"/api/v1/accounts/{user.account_id}", None),
    ]:
        response = await browser.request(method, path, json=body)
        await error(response, 403, "IMPERSONATION")
    # A step-up does not lift it either (the operator cannot refresh auth_time).
    await error(
        await browser.post("/api/v1/auth/reauth", json={"password": user.password}),
        403,
        "IMPERSONATION",
    )
    row = await db.fetch_one("SELECT deleted_at, email FROM users WHERE id = %(u)s", {"u": user.id})
    assert row["deleted_at"] is None and row["email"] == user.email
    assert await db.fetch_val(
        "SELECT deleted_at IS NULL FROM accounts WHERE id = %(a)s", {"a": user.account_id}
    )
    # Ordinary actions work: the operator sees what the user sees.
    assert (await browser.get("/api/v1/accounts")).status == 200


async def test_switching_accounts_keeps_the_act_claim_and_the_end(
    client: Any, make_client: Any, factory: Factory, key: Any
) -> None:
    owner = await factory.user(plan="team")
    user = await factory.user()
    assert owner.account_id is not None
    await factory.member(owner.account_id, user.id, "member")
    browser = await impersonating(make_client, client, key, user)
    before = jwt.decode(access_token(browser), options={"verify_signature": False})
    response = await browser.post(
        "/api/v1/accounts/switch", json={"accountId": str(owner.account_id)}
    )
    assert response.status == 200, await response.text()
    after = jwt.decode(access_token(browser), options={"verify_signature": False})
    assert after["aid"] == str(owner.account_id)
    assert after["act"] == before["act"] and after["exp"] <= before["exp"]
    await error(await browser.delete("/api/v1/users/me"), 403, "IMPERSONATION")


async def test_pages_show_the_banner_and_refuse_sensitive_forms(
    client: Any, make_client: Any, factory: Factory, key: Any, db: Database
) -> None:
    user = await factory.user()
    browser = await impersonating(make_client, client, key, user)
    banner = f"You are signed in as {user.email} by an operator"
    for path in ("/account", "/accounts", "/notifications", "/notifications/preferences"):
        page = await browser.get(path)
        assert page.status == 200, path
        assert banner in await page.text(), path
    # The user's own session shows no banner.
    own = await make_client()
    own.session.cookie_jar.update_cookies(
        await factory.cookies(user), response_url=own.make_url("/")
    )
    assert "by an operator" not in await (await own.get("/account")).text()

    # A sensitive form on a hosted page: refused in words, nothing performed.
    page = await (await browser.get("/account")).text()
    found = re.search(
        r'action="/account/mfa/recovery-codes"[^>]*>\s*<input type="hidden" name="csrf"'
        r' value="([0-9a-f]+)"',
        page,
    )
    if found is None:  # no factor yet: the TOTP setup form is the sensitive one shown
        found = re.search(
            r'action="/account/mfa/totp/setup"[^>]*>\s*<input type="hidden" name="csrf"'
            r' value="([0-9a-f]+)"',
            page,
        )
        action = "/account/mfa/totp/setup"
    else:
        action = "/account/mfa/recovery-codes"
    assert found is not None, page
    response = await browser.post(action, data={"csrf": found.group(1)})
    text = await response.text()
    assert response.status == 403, text
    assert "Not allowed while an operator is signed in as this user." in text
    assert (
        await db.fetch_val("SELECT count(*) FROM mfa_totp WHERE user_id = %(u)s", {"u": user.id})
        == 0
    )


async def test_audited_with_reason_and_told_to_the_user(
    client: Any, make_client: Any, factory: Factory, key: Any, db: Database
) -> None:
    user = await factory.user()
    await impersonating(make_client, client, key, user)
    rows = await db.fetch_all(
        "SELECT action, data FROM audit_log WHERE target = %(t)s"
        " AND action LIKE 'user.impersonation%%' ORDER BY id",
        {"t": str(user.id)},
    )
    assert [r["action"] for r in rows] == [
        "user.impersonation_link_created",
        "user.impersonation_started",
    ]
    assert rows[0]["data"]["reason"] == REASON
    assert rows[0]["data"]["actor"] == {"type": "api_key", "id": str(key.id), "name": "support"}
    assert rows[1]["data"]["reason"] == REASON and rows[1]["data"]["act"] == f"apikey:{key.id}"
    events = await db.fetch_all(
        "SELECT type, data FROM security_events WHERE user_id = %(u)s AND type = 'impersonated'",
        {"u": user.id},
    )
    assert len(events) == 1 and events[0]["data"]["reason"] == REASON
    await error(
        await client.post(
            f"{USERS}/{user.id}/impersonate", json={"reason": "  "}, headers=bearer(key.token)
        ),
        422,
    )


async def test_a_disabled_user_cannot_be_impersonated_and_disabling_ends_it(
    client: Any, make_client: Any, factory: Factory, key: Any
) -> None:
    user = await factory.user()
    browser = await impersonating(make_client, client, key, user)
    url = await link_for(client, key, user)
    await data(await client.post(f"{USERS}/{user.id}/disable", headers=bearer(key.token)))
    await error(await browser.get("/api/v1/users/me"), 401)
    _, response = await open_link(make_client, url)
    assert response.status == 403
    await error(
        await client.post(
            f"{USERS}/{user.id}/impersonate", json={"reason": REASON}, headers=bearer(key.token)
        ),
        409,
    )
