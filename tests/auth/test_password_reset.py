"""POST /api/v1/auth/password-reset/request and /confirm."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from tenantd.auth import service
from tenantd.db import Database
from tenantd.identity.tokens import token_hash
from tests.auth.helpers import last_token, mail_sent, mails_to, register
from tests.helpers import PASSWORD, SECRET, error_of

RESET = "/reset-password"


async def request_reset(client: Any, email: str) -> Any:
    response = await client.post("/api/v1/auth/password-reset/request", json={"email": email})
    assert response.status == 200
    await mail_sent(client)
    return (await response.json())["data"]


async def test_reset_request_mails_a_one_hour_link_and_stores_only_its_hash(
    client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    user = await factory.user()
    data = await request_reset(client, user.email)
    assert data == {"message": service.RESET_MESSAGE}
    (message,) = mails_to(mail_dir, user.email)
    assert message["Subject"] == "Reset your password"
    token = last_token(mail_dir, user.email, RESET)
    row = await db.fetch_one("SELECT * FROM user_tokens")
    assert row is not None
    assert row["purpose"] == "password_reset"
    assert bytes(row["token_hash"]) == token_hash(SECRET, token)
    lifetime = row["expires_at"] - dt.datetime.now(dt.UTC)
    assert dt.timedelta(minutes=59) < lifetime <= dt.timedelta(hours=1)


async def test_reset_request_answers_the_same_for_unknown_addresses(
    client: Any, factory: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    known = await request_reset(client, user.email)
    unknown = await request_reset(client, "nobody@example.com")
    assert known == unknown
    assert mails_to(mail_dir, "nobody@example.com") == []


async def test_confirm_sets_the_password_and_ends_every_session(
    make_client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    user = await factory.user()
    laptop = await make_client(cookies=await factory.cookies(user))
    phone = await make_client(cookies=await factory.cookies(user))
    assert (await laptop.get("/test/required")).status == 200

    anonymous = await make_client()
    await request_reset(anonymous, user.email)
    token = last_token(mail_dir, user.email, RESET)
    response = await anonymous.post(
        "/api/v1/auth/password-reset/confirm", json={"token": token, "password": "brand new secret"}
    )
    body = await response.json()
    assert response.status == 200, body
    assert body["data"] == {}

    # Old access tokens and refresh sessions are dead.
    for browser in (laptop, phone):
        denied = await browser.get("/test/required")
        assert denied.status == 401
        assert error_of(await denied.json())["details"]["reason"] == "invalid_session"
    refresh = await phone.post("/api/v1/auth/refresh")
    assert refresh.status == 401
    assert await db.fetch_val("SELECT count(*) FROM sessions WHERE revoked_at IS NULL") == 0

    old = await anonymous.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert old.status == 401
    new = await anonymous.post(
        "/api/v1/auth/login", json={"email": user.email, "password": "brand new secret"}
    )
    assert new.status == 200
    # The session issued after the cutoff works.
    assert (await anonymous.get("/test/required")).status == 200

    reused = await anonymous.post(
        "/api/v1/auth/password-reset/confirm", json={"token": token, "password": "third secret!"}
    )
    assert reused.status == 422
    assert "token" in error_of(await reused.json())["details"]["fields"]


async def test_a_new_request_retires_the_older_link(
    client: Any, factory: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    await request_reset(client, user.email)
    first = last_token(mail_dir, user.email, RESET)
    await request_reset(client, user.email)
    second = last_token(mail_dir, user.email, RESET)
    stale = await client.post(
        "/api/v1/auth/password-reset/confirm", json={"token": first, "password": "brand new secret"}
    )
    assert stale.status == 422
    fresh = await client.post(
        "/api/v1/auth/password-reset/confirm",
        json={"token": second, "password": "brand new secret"},
    )
    assert fresh.status == 200


async def test_expired_and_wrong_purpose_tokens_are_refused(
    client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    user = await factory.user()
    await request_reset(client, user.email)
    token = last_token(mail_dir, user.email, RESET)
    await db.execute("UPDATE user_tokens SET expires_at = now() - interval '1 second'")
    expired = await client.post(
        "/api/v1/auth/password-reset/confirm", json={"token": token, "password": "brand new secret"}
    )
    assert expired.status == 422

    await register(client, "pending@example.com")
    verify_token = last_token(mail_dir, "pending@example.com")
    wrong = await client.post(
        "/api/v1/auth/password-reset/confirm",
        json={"token": verify_token, "password": "brand new secret"},
    )
    assert wrong.status == 422
    still = await client.post("/auth/verify-email", json={"token": verify_token})
    assert still.status == 200


async def test_confirm_validates_the_new_password(
    client: Any, factory: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    await request_reset(client, user.email)
    token = last_token(mail_dir, user.email, RESET)
    for password in ("short", "y" * 257):
        response = await client.post(
            "/api/v1/auth/password-reset/confirm", json={"token": token, "password": password}
        )
        assert response.status == 422
        assert set(error_of(await response.json())["details"]["fields"]) == {"password"}
    # A refused body does not burn the token.
    ok = await client.post(
        "/api/v1/auth/password-reset/confirm", json={"token": token, "password": "y" * 256}
    )
    assert ok.status == 200


async def test_oauth_only_user_can_set_a_password(
    client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    user = await factory.user(password=None)
    await db.execute(
        "INSERT INTO user_identities (user_id, provider, subject, email)"
        " VALUES (%(u)s, 'google', 'sub-1', %(e)s)",
        {"u": user.id, "e": user.email},
    )
    await request_reset(client, user.email)
    token = last_token(mail_dir, user.email, RESET)
    response = await client.post(
        "/api/v1/auth/password-reset/confirm", json={"token": token, "password": PASSWORD}
    )
    assert response.status == 200
    login = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": PASSWORD}
    )
    assert login.status == 200
    me = await (await client.get("/api/v1/users/me")).json()
    assert me["hasPasswordLogin"] is True
    assert [p["provider"] for p in me["authProviders"]] == ["password", "google"]


async def test_a_reset_is_not_undone_by_a_pending_verification_link(
    make_client: Any, mail_dir: Path
) -> None:
    browser = await make_client()
    await register(browser, "mixed@example.com", "first password")
    await register(browser, "mixed@example.com", "second password")  # link carries this one
    verify_token = last_token(mail_dir, "mixed@example.com")
    await request_reset(browser, "mixed@example.com")
    reset_token = last_token(mail_dir, "mixed@example.com", RESET)
    confirmed = await browser.post(
        "/api/v1/auth/password-reset/confirm",
        json={"token": reset_token, "password": "chosen at reset"},
    )
    assert confirmed.status == 200
    assert (await browser.post("/auth/verify-email", json={"token": verify_token})).status == 200
    login = await browser.post(
        "/api/v1/auth/login", json={"email": "mixed@example.com", "password": "chosen at reset"}
    )
    assert login.status == 200
