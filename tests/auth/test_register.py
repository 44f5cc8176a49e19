"""POST /auth/register and /api/v1/auth/resend-verification."""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

from argon2 import PasswordHasher

from tenantd.auth import service
from tenantd.db import Database
from tenantd.identity.tokens import token_hash
from tenantd.web.routing import ROUTE_SPEC
from tests.auth.helpers import last_token, link_token, mail_sent, mails_to, register, set_cookies
from tests.factories import mail_text
from tests.helpers import PASSWORD, SECRET, error_of


async def test_register_creates_an_unverified_user_and_mails_a_link(
    client: Any, db: Database, mail_dir: Path
) -> None:
    response = await client.post(
        "/auth/register",
        json={"email": "ada@example.com", "password": PASSWORD, "firstName": "Ada"},
    )
    body = await response.json()
    assert response.status == 200
    assert body["success"] is True
    assert body["data"] == {"message": service.REGISTER_MESSAGE}
    # No session cookie: only the binding of this sign-up (see test_registration_binding).
    assert set(set_cookies(response)) == {"registration_binding"}

    user = await db.fetch_one("SELECT * FROM users WHERE email = 'ada@example.com'")
    assert user is not None
    assert user["email_verified_at"] is None
    assert user["first_name"] == "Ada"
    # The password waits on the sign-up's link, not on the user, until the link is used.
    assert await db.fetch_val("SELECT count(*) FROM user_passwords") == 0
    stored = await db.fetch_val("SELECT password_hash FROM user_tokens")
    assert stored.startswith("$argon2id$")
    assert PasswordHasher().verify(stored, PASSWORD)
    # No session, account or membership before verification.
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 0
    assert await db.fetch_val("SELECT count(*) FROM memberships") == 0
    assert await db.fetch_val("SELECT count(*) FROM sessions") == 0

    (message,) = mails_to(mail_dir, "ada@example.com")
    assert message["Subject"] == "Verify your email address"
    assert "Hello Ada" in mail_text(message)
    token = last_token(mail_dir, "ada@example.com")
    row = await db.fetch_one("SELECT * FROM user_tokens")
    assert row is not None
    assert row["purpose"] == "verify_email"
    assert row["user_id"] == user["id"]
    assert bytes(row["token_hash"]) == token_hash(SECRET, token)
    lifetime = row["expires_at"] - dt.datetime.now(dt.UTC)
    assert dt.timedelta(hours=47) < lifetime <= dt.timedelta(hours=48)


async def test_known_email_gets_the_same_answer_and_the_hash_is_computed_anyway(
    client: Any, factory: Any, mail_dir: Path, monkeypatch: Any
) -> None:
    verified = await factory.user(email="known@example.com")
    calls: list[str] = []
    real_hash = service.hash_password

    async def counting_hash(password: str) -> str:
        calls.append(password)
        return await real_hash(password)

    monkeypatch.setattr(service, "hash_password", counting_hash)
    fresh = await client.post(
        "/auth/register", json={"email": "new@example.com", "password": PASSWORD}
    )
    known = await client.post(
        "/auth/register", json={"email": verified.email, "password": "another passphrase"}
    )
    upper = await client.post(
        "/auth/register", json={"email": "KNOWN@example.com", "password": "another passphrase"}
    )
    assert fresh.status == known.status == upper.status == 200
    fresh_body, known_body, upper_body = [await r.json() for r in (fresh, known, upper)]
    assert fresh_body["data"] == known_body["data"] == upper_body["data"]
    # The same cookie for every address: a binding, never a session.
    for response in (fresh, known, upper):
        cookies = set_cookies(response)
        assert set(cookies) == {"registration_binding"}
        assert cookies["registration_binding"]["max-age"] == str(48 * 3600)
    assert len(calls) == 3  # argon2 ran for the known address too (timing)

    # The verified owner is told, with no link, and the password did not change.
    notices = mails_to(mail_dir, verified.email)
    assert len(notices) == 2
    assert all(n["Subject"] == "You already have an account" for n in notices)
    assert "token=" not in mail_text(notices[0])
    login = await client.post(
        "/api/v1/auth/login", json={"email": verified.email, "password": verified.password}
    )
    assert login.status == 200


async def test_register_again_while_unverified_keeps_the_earlier_link(
    client: Any, db: Database, mail_dir: Path
) -> None:
    await register(client, "twice@example.com")
    first = last_token(mail_dir, "twice@example.com")
    await register(client, "twice@example.com")
    second = last_token(mail_dir, "twice@example.com")
    assert first != second
    assert await db.fetch_val("SELECT count(*) FROM users") == 1
    assert await db.fetch_val("SELECT count(*) FROM user_tokens") == 2

    # A later sign-up never invalidates an earlier link; verifying with one ends them all
    # (issue 25: a leftover link must not sign in later, past a factor added meanwhile).
    old = await client.post("/auth/verify-email", json={"token": first})
    assert old.status == 200
    for used_or_left in (second, first):
        again = await client.post("/auth/verify-email", json={"token": used_or_left})
        assert again.status == 422
        assert "token" in error_of(await again.json())["details"]["fields"]
    assert await db.fetch_val("SELECT count(*) FROM user_tokens") == 0


async def test_the_mailbox_owners_sign_up_wins_over_an_earlier_hostile_one(
    make_client: Any, mail_dir: Path
) -> None:
    attacker = await make_client()
    await register(attacker, "victim@example.com", "attacker chose this")
    victim = await make_client()
    await register(victim, "victim@example.com", "victim chose this")
    verified = await victim.post(
        "/auth/verify-email", json={"token": last_token(mail_dir, "victim@example.com")}
    )
    assert verified.status == 200
    stolen = await attacker.post(
        "/api/v1/auth/login",
        json={"email": "victim@example.com", "password": "attacker chose this"},
    )
    assert stolen.status == 401
    own = await victim.post(
        "/api/v1/auth/login", json={"email": "victim@example.com", "password": "victim chose this"}
    )
    assert own.status == 200


async def test_concurrent_sign_ups_of_one_address_leave_one_user(
    make_client: Any, db: Database
) -> None:
    browsers = [await make_client() for _ in range(10)]
    responses = await asyncio.gather(
        *(
            b.post("/auth/register", json={"email": "race@example.com", "password": PASSWORD})
            for b in browsers
        )
    )
    assert [r.status for r in responses] == [200] * 10
    assert await db.fetch_val("SELECT count(*) FROM users") == 1
    # One link per sign-up, each with its own binding.
    assert await db.fetch_val("SELECT count(*) FROM user_tokens") == 10
    assert await db.fetch_val("SELECT count(DISTINCT binding_hash) FROM user_tokens") == 10


async def test_register_validation_gives_per_field_details(client: Any, db: Database) -> None:
    cases = [
        ({"email": "not-an-email", "password": PASSWORD}, "email"),
        ({"email": "a@example.com", "password": "short"}, "password"),
        ({"email": "a@example.com", "password": "x" * 257}, "password"),
        ({"password": PASSWORD}, "email"),
        ({"email": "a@example.com", "password": PASSWORD, "admin": True}, "admin"),
        ({"email": "a@example.com", "password": PASSWORD, "firstName": "x" * 101}, "firstName"),
    ]
    for payload, field in cases:
        response = await client.post("/auth/register", json=payload)
        body = await response.json()
        assert response.status == 422, (payload, body)
        error = error_of(body)
        assert error["code"] == "VALIDATION_ERROR"
        assert field in error["details"]["fields"], (payload, error)
    exact = await client.post(
        "/auth/register", json={"email": "a@example.com", "password": "x" * 256}
    )
    assert exact.status == 200
    eight = await client.post(
        "/auth/register", json={"email": "b@example.com", "password": "x" * 8}
    )
    assert eight.status == 200
    assert await db.fetch_val("SELECT count(*) FROM users") == 2


async def test_resend_adds_a_link_and_answers_the_same_for_everyone(
    client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    await register(client, "slow@example.com")
    first = last_token(mail_dir, "slow@example.com")
    verified = await factory.user(email="done@example.com")
    bodies = []
    for email in ("slow@example.com", "nobody@example.com", verified.email, "SLOW@example.com"):
        response = await client.post("/api/v1/auth/resend-verification", json={"email": email})
        assert response.status == 200
        bodies.append((await response.json())["data"])
    await mail_sent(client)
    assert all(b == {"message": service.RESEND_MESSAGE} for b in bodies)
    assert mails_to(mail_dir, "nobody@example.com") == []
    assert mails_to(mail_dir, verified.email) == []
    resent = mails_to(mail_dir, "slow@example.com")
    assert len(resent) == 3
    # Jobs write the mails, so file order need not be send order: take a resent link.
    latest = next(t for t in (link_token(m, "/verify-email") for m in resent) if t != first)
    assert await db.fetch_val("SELECT count(*) FROM user_tokens") == 3

    # A resend does not break earlier links either; verifying ends the resent one too.
    earlier = await client.post("/auth/verify-email", json={"token": first})
    assert earlier.status == 200
    fresh = await client.post("/auth/verify-email", json={"token": latest})
    assert fresh.status == 422


async def test_resend_keeps_the_password_the_latest_sign_up_chose(
    make_client: Any, mail_dir: Path
) -> None:
    attacker = await make_client()
    await register(attacker, "keep@example.com", "attacker chose this")
    victim = await make_client()
    await register(victim, "keep@example.com", "victim chose this")
    # The attacker asks for a resend hoping to drop the victim's password from the link.
    await attacker.post("/api/v1/auth/resend-verification", json={"email": "keep@example.com"})
    await mail_sent(attacker)
    verified = await victim.post(
        "/auth/verify-email", json={"token": last_token(mail_dir, "keep@example.com")}
    )
    assert verified.status == 200
    stolen = await attacker.post(
        "/api/v1/auth/login", json={"email": "keep@example.com", "password": "attacker chose this"}
    )
    assert stolen.status == 401


async def test_routes_declare_their_abuse_limit_scope(app: Any) -> None:
    scopes = {spec.path: spec.rate_limit for spec in app[ROUTE_SPEC]}
    assert scopes["/auth/register"] == "register"
    assert scopes["/api/v1/auth/resend-verification"] == "resend_verification"
    assert scopes["/api/v1/auth/login"] == "login"
    assert scopes["/api/v1/auth/password-reset/request"] == "password_reset"
    assert scopes["/api/v1/auth/password"] == "login"
