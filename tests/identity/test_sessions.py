"""Refresh rotation, logout, logout-all, MFA status and the /me union."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web

from tenantd.db import Database
from tenantd.identity.tokens import token_hash
from tests.auth.helpers import set_cookies
from tests.helpers import SECRET, access_claims, error_of


@pytest.fixture
def reuse_interval() -> str | None:
    return None  # REFRESH_REUSE_INTERVAL_SECONDS left at its default


@pytest.fixture
def env(env: dict[str, str], reuse_interval: str | None) -> dict[str, str]:
    if reuse_interval is not None:
        env["REFRESH_REUSE_INTERVAL_SECONDS"] = reuse_interval
    return env


# With no reuse interval every second use of a refresh token is reuse (strict rotation); the
# interval itself is tested in test_refresh_reuse.py.
strict_rotation = pytest.mark.parametrize("reuse_interval", ["0"])


async def refresh_with(make_client: Any, refresh_token: str) -> Any:
    browser = await make_client(cookies={"refresh_token": refresh_token})
    return await browser.post("/api/v1/auth/refresh")


@strict_rotation
async def test_refresh_rotates_both_cookies(
    make_client: Any, factory: Any, db: Database, app: web.Application
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    response = await refresh_with(make_client, cookies["refresh_token"])
    body = await response.json()
    assert response.status == 200, body
    assert body["data"]["user"]["id"] == str(user.id)
    fresh = set_cookies(response)
    assert fresh["refresh_token"]["value"] != cookies["refresh_token"]
    claims = access_claims(app, fresh["auth_token"]["value"])
    assert claims.user_id == user.id and claims.account_id == user.account_id
    rows = await db.fetch_all("SELECT * FROM sessions ORDER BY created_at")
    assert len(rows) == 2
    assert rows[0]["rotated_at"] is not None
    assert rows[0]["family_id"] == rows[1]["family_id"]

    # The new pair works; the old refresh token is now refused.
    new_browser = await make_client(cookies={k: v["value"] for k, v in fresh.items()})
    assert (await new_browser.get("/test/required")).status == 200
    old = await refresh_with(make_client, cookies["refresh_token"])
    assert old.status == 401
    assert error_of(await old.json())["code"] == "UNAUTHORIZED"


@strict_rotation
async def test_reusing_a_rotated_token_revokes_the_family(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    bystander = await factory.cookies(user)  # another device: a different family
    first = await refresh_with(make_client, cookies["refresh_token"])
    new_refresh = set_cookies(first)["refresh_token"]["value"]
    stolen = await refresh_with(make_client, cookies["refresh_token"])
    assert stolen.status == 401
    # The legitimate holder of the newest token is logged out too (theft signal).
    victim = await refresh_with(make_client, new_refresh)
    assert victim.status == 401
    assert await db.fetch_val("SELECT count(*) FROM sessions WHERE revoked_at IS NULL") == 1
    other_device = await refresh_with(make_client, bystander["refresh_token"])
    assert other_device.status == 200


async def test_refresh_refuses_unknown_expired_and_cut_off_sessions(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    unknown = await refresh_with(make_client, "not-a-known-refresh-token")
    assert unknown.status == 401
    assert error_of(await unknown.json())["details"]["reason"] == "invalid_session"

    cookies = await factory.cookies(user)
    await db.execute("UPDATE sessions SET expires_at = now() - interval '1 second'")
    expired = await refresh_with(make_client, cookies["refresh_token"])
    assert expired.status == 401
    assert set_cookies(expired) == {}


async def test_refresh_refuses_when_the_aid_membership_is_revoked(
    make_client: Any, factory: Any, db: Database
) -> None:
    owner = await factory.user()
    member = await factory.user(account=False)
    await factory.member(owner.account_id, member.id, "member")
    cookies = await factory.cookies(member, account_id=owner.account_id)
    assert (await refresh_with(make_client, cookies["refresh_token"])).status == 200
    cookies = await factory.cookies(member, account_id=owner.account_id)
    await db.execute(
        "UPDATE memberships SET revoked_at = now() WHERE user_id = %(u)s", {"u": member.id}
    )
    refused = await refresh_with(make_client, cookies["refresh_token"])
    assert refused.status == 401


async def test_refresh_refuses_when_the_account_is_soft_deleted(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    await db.execute("UPDATE accounts SET deleted_at = now()")
    refused = await refresh_with(make_client, cookies["refresh_token"])
    assert refused.status == 401


async def test_logout_revokes_this_session_and_clears_cookies(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    other = await factory.cookies(user)
    browser = await make_client(cookies=cookies)
    response = await browser.post("/api/v1/auth/logout")
    body = await response.json()
    assert response.status == 200
    assert body["data"] == {}
    cleared = set_cookies(response)
    for name in ("auth_token", "refresh_token"):
        assert cleared[name]["value"] in ("", '""')
        assert cleared[name]["max-age"] == "0"
        assert cleared[name]["path"] == "/"
    assert (await refresh_with(make_client, cookies["refresh_token"])).status == 401
    assert await db.fetch_val("SELECT count(*) FROM revoked_tokens") == 1
    # Another device of the same user is untouched.
    other_browser = await make_client(cookies=other)
    assert (await other_browser.get("/test/required")).status == 200


async def test_logout_all_ends_every_session_and_token(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    devices = [await factory.cookies(user) for _ in range(3)]
    stranger = await factory.user()
    stranger_cookies = await factory.cookies(stranger)
    browser = await make_client(cookies=devices[0])
    response = await browser.post("/api/v1/auth/logout-all")
    assert response.status == 200
    assert set_cookies(response)["auth_token"]["max-age"] == "0"
    for cookies in devices:
        assert (await (await make_client(cookies=cookies)).get("/test/required")).status == 401
        assert (await refresh_with(make_client, cookies["refresh_token"])).status == 401
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM sessions WHERE user_id = %(u)s AND revoked_at IS NULL",
            {"u": user.id},
        )
        == 0
    )
    assert (await (await make_client(cookies=stranger_cookies)).get("/test/required")).status == 200
    # Signing in again after the cutoff works.
    login = await browser.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert login.status == 200
    assert (await browser.get("/test/required")).status == 200


async def test_mfa_status(make_client: Any, factory: Any, client: Any) -> None:
    anonymous = await client.get("/api/v1/auth/mfa/status")
    body = await anonymous.json()
    assert anonymous.status == 200
    assert body["success"] is True and body["data"] == {"enabled": False}
    user = await factory.user()
    signed = await make_client(cookies=await factory.cookies(user))
    assert (await (await signed.get("/api/v1/auth/mfa/status")).json())["data"] == {
        "enabled": False,
        "methods": [],
        "recoveryCodesRemaining": 0,
    }


async def test_me_anonymous_body_is_exactly_user_null(client: Any) -> None:
    response = await client.get("/api/v1/users/me")
    assert response.status == 200
    assert await response.read() == b'{"user":null}'


async def test_me_signed_in_is_the_complete_union(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user(first_name="Ada", last_name="Lovelace", plan="team")
    other = await factory.user()
    await factory.member(other.account_id, user.id, "admin")
    await db.execute(
        "INSERT INTO account_feature_overrides (account_id, feature, enabled)"
        " VALUES (%(a)s, 'beta_reports', true)",
        {"a": user.account_id},
    )
    await db.execute(
        "INSERT INTO user_identities (user_id, provider, subject) VALUES (%(u)s, 'github', '42')",
        {"u": user.id},
    )
    browser = await make_client(cookies=await factory.cookies(user))
    body = await (await browser.get("/api/v1/users/me")).json()
    assert set(body) == {
        "user",
        "account",
        "role",
        "memberships",
        "features",
        "permissions",
        "capabilities",
        "authProviders",
        "hasPasswordLogin",
    }
    assert body["user"]["id"] == str(user.id)
    assert body["user"]["email"] == user.email
    assert body["user"]["firstName"] == "Ada"
    assert body["account"]["id"] == str(user.account_id)
    assert set(body["account"]) == {"id", "name", "requireMfa"}
    assert body["account"]["requireMfa"] is False and body["user"]["mfaEnabled"] is False
    assert body["role"] == "owner"
    assert body["permissions"] == ["*"]
    assert sorted((m["accountId"], m["role"]) for m in body["memberships"]) == sorted(
        [(str(user.account_id), "owner"), (str(other.account_id), "admin")]
    )
    assert body["features"]["team_invitations"] is True
    assert body["features"]["beta_reports"] is True
    assert isinstance(body["capabilities"], dict) and body["capabilities"]
    assert all(isinstance(v, bool) for v in body["capabilities"].values())
    assert [p["provider"] for p in body["authProviders"]] == ["password", "github"]
    assert body["hasPasswordLogin"] is True


async def test_refresh_tokens_are_stored_only_as_hmac(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    row = await db.fetch_one("SELECT * FROM sessions")
    assert row is not None
    assert bytes(row["token_hash"]) == token_hash(SECRET, cookies["refresh_token"])


@strict_rotation
async def test_concurrent_uses_of_one_refresh_token_renew_once_then_revoke_the_family(
    make_client: Any, factory: Any, db: Database
) -> None:
    import asyncio

    user = await factory.user()
    cookies = await factory.cookies(user)
    browsers = [
        await make_client(cookies={"refresh_token": cookies["refresh_token"]}) for _ in range(20)
    ]
    responses = await asyncio.gather(*(b.post("/api/v1/auth/refresh") for b in browsers))
    statuses = sorted(r.status for r in responses)
    assert statuses.count(200) == 1, statuses
    assert statuses.count(401) == 19
    rows = await db.fetch_all("SELECT revoked_at, rotated_at FROM sessions")
    assert len(rows) == 2  # the presented session and exactly one successor
    assert all(r["revoked_at"] is not None for r in rows)  # reuse revoked the whole family
    winner = next(r for r in responses if r.status == 200)
    fresh = set_cookies(winner)["refresh_token"]["value"]
    assert (await refresh_with(make_client, fresh)).status == 401
