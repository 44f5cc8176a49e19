"""POST /auth/verify-email: provisioning, cookies, single use, concurrency, domain claims."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from pathlib import Path
from typing import Any

from tenantd.accounts.provisioning import DomainConflict, Provisioned
from tenantd.auth import service
from tenantd.db import Conn, Database
from tenantd.identity.tokens import new_opaque_token, token_hash
from tenantd.suppression import service as suppression
from tests.auth.helpers import last_token, mail_sent, mails_to, register, set_cookies
from tests.factories import mail_text
from tests.helpers import SECRET, access_claims, error_of


async def test_verify_provisions_the_account_and_signs_in(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    browser = await make_client()
    await register(browser, "grace@Example.COM", firstName="Grace", lastName="Hopper")
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider) VALUES"
        " ('grace@example.com', 'hard_bounce', 'resend')"
    )
    token = last_token(mail_dir, "grace@example.com")
    response = await browser.post("/auth/verify-email", json={"token": token})
    body = await response.json()
    assert response.status == 200, body
    data = body["data"]
    assert data["user"]["email"] == "grace@example.com"
    assert data["user"]["emailVerifiedAt"] is not None
    assert data["account"]["name"] == "Grace Hopper"

    cookies = set_cookies(response)
    # device_id: the browser, for the new sign-in mail (test_new_signin_mail.py)
    assert set(cookies) == {"auth_token", "refresh_token", "registration_binding", "device_id"}
    assert cookies["registration_binding"]["max-age"] == "0"  # used up: cleared
    assert data["hasPasswordLogin"] is True
    claims = access_claims(browser, cookies["auth_token"]["value"])
    assert str(claims.user_id) == data["user"]["id"]
    assert str(claims.account_id) == data["account"]["id"]

    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1
    membership = await db.fetch_one("SELECT * FROM memberships")
    assert membership is not None
    assert membership["role"] == "owner"
    assert str(membership["account_id"]) == data["account"]["id"]
    assert await db.fetch_val("SELECT count(*) FROM email_suppressions") == 0
    assert await db.fetch_val("SELECT count(*) FROM user_tokens") == 0
    assert await db.fetch_val("SELECT count(*) FROM sessions") == 1

    me = await browser.get("/api/v1/users/me")
    me_body = await me.json()
    assert me_body["user"]["id"] == data["user"]["id"]
    assert me_body["role"] == "owner"


async def test_a_verification_link_works_once(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    browser = await make_client()
    await register(browser, "once@example.com")
    token = last_token(mail_dir, "once@example.com")
    assert (await browser.post("/auth/verify-email", json={"token": token})).status == 200
    again = await (await make_client()).post("/auth/verify-email", json={"token": token})
    body = await again.json()
    assert again.status == 422
    assert set_cookies(again) == {}
    error = error_of(body)
    assert error["code"] == "VALIDATION_ERROR"
    assert set(error["details"]["fields"]) == {"token"}
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1


async def test_unknown_expired_and_wrong_purpose_tokens_are_refused(
    client: Any, db: Database, mail_dir: Path
) -> None:
    await register(client, "late@example.com")
    token = last_token(mail_dir, "late@example.com")
    await db.execute("UPDATE user_tokens SET expires_at = now() - interval '1 second'")
    expired = await client.post("/auth/verify-email", json={"token": token})
    assert expired.status == 422

    await client.post("/api/v1/auth/password-reset/request", json={"email": "late@example.com"})
    await mail_sent(client)
    reset_token = last_token(mail_dir, "late@example.com", "/reset-password")
    wrong_purpose = await client.post("/auth/verify-email", json={"token": reset_token})
    assert wrong_purpose.status == 422

    for bogus in (new_opaque_token(), "x", "' OR 1=1 --"):
        response = await client.post("/auth/verify-email", json={"token": bogus})
        assert response.status == 422
        assert "token" in error_of(await response.json())["details"]["fields"]
    empty = await client.post("/auth/verify-email", json={"token": ""})
    assert empty.status == 422
    user = await db.fetch_one("SELECT email_verified_at FROM users")
    assert user is not None and user["email_verified_at"] is None
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 0


async def test_concurrent_verifications_of_one_token_leave_one_account(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    await register(await make_client(), "burst@example.com")
    token = last_token(mail_dir, "burst@example.com")
    browsers = [await make_client() for _ in range(20)]
    responses = await asyncio.gather(
        *(b.post("/auth/verify-email", json={"token": token}) for b in browsers)
    )
    statuses = sorted(r.status for r in responses)
    assert statuses == [200] + [422] * 19
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1
    assert await db.fetch_val("SELECT count(*) FROM memberships") == 1
    assert await db.fetch_val("SELECT count(*) FROM memberships WHERE role = 'owner'") == 1
    assert await db.fetch_val("SELECT count(*) FROM sessions") == 1


async def test_concurrent_verifications_with_different_tokens_of_one_user(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    await register(await make_client(), "two@example.com")
    user_id = await db.fetch_val("SELECT id FROM users")
    # Several live links at once (bypassing rotation), used concurrently.
    tokens = [new_opaque_token() for _ in range(5)]
    for token in tokens:
        await db.execute(
            "INSERT INTO user_tokens (token_hash, user_id, purpose, expires_at)"
            " VALUES (%(h)s, %(u)s, 'verify_email', now() + interval '1 hour')",
            {"h": token_hash(SECRET, token), "u": user_id},
        )
    browsers = [await make_client() for _ in range(20)]
    responses = await asyncio.gather(
        *(
            b.post("/auth/verify-email", json={"token": tokens[i % len(tokens)]})
            for i, b in enumerate(browsers)
        )
    )
    assert all(r.status in (200, 422) for r in responses)
    assert sum(r.status == 200 for r in responses) >= 1
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1
    assert await db.fetch_val("SELECT count(*) FROM memberships WHERE revoked_at IS NULL") == 1
    assert await db.fetch_val("SELECT count(*) FROM memberships WHERE role = 'owner'") == 1


async def test_domain_claimed_commits_the_request_answers_409_and_tells_the_owner(
    make_client: Any, factory: Any, db: Database, mail_dir: Path, monkeypatch: Any
) -> None:
    owner = await factory.user(email="boss@acme-corp.io", first_name="Boss")
    await db.execute("UPDATE accounts SET claimed_domain = 'acme-corp.io'")

    async def claimed(conn: Conn, settings: Any, *, user_id: uuid.UUID) -> Provisioned:
        request_id = await conn.fetch_val(
            "INSERT INTO join_requests (account_id, user_id, domain)"
            " VALUES (%(a)s, %(u)s, 'acme-corp.io') RETURNING id",
            {"a": owner.account_id, "u": user_id},
        )
        assert owner.account_id is not None
        conflict = DomainConflict(
            account_id=owner.account_id, domain="acme-corp.io", join_request_id=request_id
        )
        return Provisioned(account_id=None, created=False, conflict=conflict)

    monkeypatch.setattr(service, "provision_personal_account", claimed)
    browser = await make_client()
    await register(browser, "newbie@acme-corp.io")
    response = await browser.post(
        "/auth/verify-email", json={"token": last_token(mail_dir, "newbie@acme-corp.io")}
    )
    body = await response.json()
    assert response.status == 409, body
    error = error_of(body)
    assert error["code"] == "DOMAIN_CLAIMED"
    assert error["details"] == {"accountId": str(owner.account_id), "domain": "acme-corp.io"}
    assert set_cookies(response) == {}
    # Committed before the 409: the join request and the verification survive.
    assert await db.fetch_val("SELECT count(*) FROM join_requests WHERE status = 'pending'") == 1
    user = await db.fetch_one("SELECT * FROM users WHERE email = 'newbie@acme-corp.io'")
    assert user is not None and user["email_verified_at"] is not None
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 1
    assert await db.fetch_val("SELECT count(*) FROM sessions") == 0
    await mail_sent(browser)  # the notices leave from jobs, after the commit
    (notice,) = mails_to(mail_dir, "boss@acme-corp.io")
    assert "newbie@acme-corp.io" in notice["Subject"]
    assert f"/accounts/{owner.account_id}/join-requests" in mail_text(notice)


async def test_suppression_is_lifted_only_by_a_successful_verification(
    client: Any, db: Database, mail_dir: Path
) -> None:
    await register(client, "held@example.com")
    async with db.connection() as conn:
        await suppression.add(conn, "held@example.com", reason="manual", provider="manual")
    refused = await client.post("/auth/verify-email", json={"token": new_opaque_token()})
    assert refused.status == 422
    assert await db.fetch_val("SELECT count(*) FROM email_suppressions") == 1
    token = last_token(mail_dir, "held@example.com")
    assert (await client.post("/auth/verify-email", json={"token": token})).status == 200
    assert await db.fetch_val("SELECT count(*) FROM email_suppressions") == 0


async def test_verification_link_lifetime_is_48_hours(
    client: Any, db: Database, mail_dir: Path
) -> None:
    await register(client, "ttl@example.com")
    await db.execute(
        "UPDATE user_tokens SET expires_at = expires_at - interval '47 hours 59 minutes'"
    )
    remaining = await db.fetch_val("SELECT expires_at - now() FROM user_tokens")
    assert dt.timedelta(0) < remaining < dt.timedelta(minutes=2)
    token = last_token(mail_dir, "ttl@example.com")
    assert (await client.post("/auth/verify-email", json={"token": token})).status == 200
