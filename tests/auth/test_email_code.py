"""Sign-in by email (issue 29): POST /api/v1/auth/email-code mails a 6-digit code and a magic
link; POST /api/v1/auth/email-code/verify signs in with {email, code} or the link's {token}."""

from __future__ import annotations

import asyncio
import datetime as dt
import re
from pathlib import Path
from typing import Any

import pytest

from tenantd.auth import email_code
from tenantd.db import Database
from tenantd.identity.tokens import token_hash
from tests.auth.helpers import mail_sent, mails_to, set_cookies
from tests.factories import mail_text
from tests.helpers import ORIGIN, SECRET, data, error
from tests.mfa.helpers import claims, user_with_totp

REQUEST = "/api/v1/auth/email-code"
VERIFY = "/api/v1/auth/email-code/verify"
CODE = re.compile(r"code to sign in: (\d{6})")
LINK = re.compile(r"(http://\S+/email-code\?token=(\S+))")


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["MAGIC_LINK_ENABLED"] = "true"
    return env


async def ask(client: Any, email: str) -> dict[str, Any]:
    answer = await data(await client.post(REQUEST, json={"email": email}))
    await mail_sent(client)
    return dict(answer)


def last_mail(mail_dir: Path, email: str) -> tuple[str, str]:
    """The newest code mail to `email`: (code, link token)."""
    messages = [m for m in mails_to(mail_dir, email) if m["Subject"].startswith("Your sign-in")]
    assert messages, f"no code mail to {email}"
    text = mail_text(messages[-1])
    code, link = CODE.search(text), LINK.search(text)
    assert code is not None and link is not None, text
    return code.group(1), link.group(2)


def wrong(code: str) -> str:
    return f"{(int(code) + 1) % 1_000_000:06d}"


async def test_code_signs_a_known_user_in_with_the_login_answer_and_cookies(
    client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    user = await factory.user()
    answer = await ask(client, user.email)
    assert answer == {"message": email_code.REQUEST_MESSAGE}
    (message,) = mails_to(mail_dir, user.email)
    assert message["Subject"].startswith("Your sign-in code: ")
    code, link_token = last_mail(mail_dir, user.email)

    # Hashed at rest, keyed with the server secret: neither the code nor the link is stored.
    row = await db.fetch_one("SELECT * FROM email_codes")
    assert row is not None and row["email"] == user.email and row["attempts"] == 0
    assert bytes(row["code_hash"]) == token_hash(SECRET, f"email-code:{user.email}:{code}")
    assert bytes(row["link_hash"]) == token_hash(SECRET, f"email-link:{link_token}")
    stored = repr(dict(row))
    assert code not in stored and link_token not in stored
    lifetime = row["expires_at"] - dt.datetime.now(dt.UTC)
    assert dt.timedelta(minutes=9) < lifetime <= email_code.CODE_TTL

    response = await client.post(VERIFY, json={"email": user.email, "code": code})
    signed = await data(response)
    assert signed["user"]["id"] == str(user.id) and signed["user"]["email"] == user.email
    cookies = set_cookies(response)
    assert cookies["auth_token"]["httponly"] == "" and cookies["refresh_token"]["value"]
    assert claims(client)["amr"] == ["email"]
    me = await (await client.get("/api/v1/users/me")).json()
    assert me["user"]["id"] == str(user.id)
    sessions = await data(await client.get("/api/v1/auth/sessions"))
    assert [s["method"] for s in sessions] == ["email_code"]

    # Single use: the same code (and the link of the same mail) are refused afterwards.
    again = await client.post(VERIFY, json={"email": user.email, "code": code})
    assert (await error(again, 422, "VALIDATION_ERROR"))["details"]["fields"]["code"]
    await error(await client.post(VERIFY, json={"token": link_token}), 422, "VALIDATION_ERROR")


async def test_five_wrong_codes_end_the_code_and_the_right_one_is_then_refused(
    client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    user = await factory.user()
    await ask(client, user.email)
    code, link_token = last_mail(mail_dir, user.email)
    for _ in range(email_code.MAX_WRONG_CODES):
        refused = await client.post(VERIFY, json={"email": user.email, "code": wrong(code)})
        await error(refused, 422, "VALIDATION_ERROR")
    assert await db.fetch_val("SELECT attempts FROM email_codes") == 5
    right = await client.post(VERIFY, json={"email": user.email, "code": code})
    await error(right, 422, "VALIDATION_ERROR")
    await error(await client.post(VERIFY, json={"token": link_token}), 422, "VALIDATION_ERROR")
    assert (await client.get("/api/v1/users/me")).status == 200
    assert (await (await client.get("/api/v1/users/me")).json()) == {"user": None}

    # A new request starts over with a new code.
    await ask(client, user.email)
    fresh, _ = last_mail(mail_dir, user.email)
    await data(await client.post(VERIFY, json={"email": user.email, "code": fresh}))


async def test_concurrent_wrong_guesses_all_count(
    make_client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    """Twenty guesses at once cannot slip past the limit of five: each one is counted under
    the code's row lock, so the right code is refused afterwards."""
    user = await factory.user()
    client = await make_client()
    await ask(client, user.email)
    code, _ = last_mail(mail_dir, user.email)
    guesses = [f"{(int(code) + n) % 1_000_000:06d}" for n in range(1, 21)]
    answers = await asyncio.gather(
        *(client.post(VERIFY, json={"email": user.email, "code": guess}) for guess in guesses)
    )
    assert [a.status for a in answers] == [422] * 20
    assert await db.fetch_val("SELECT attempts FROM email_codes") == 5
    await error(await client.post(VERIFY, json={"email": user.email, "code": code}), 422)


async def test_the_right_code_used_twice_at_once_signs_in_once(
    make_client: Any, factory: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    first = await make_client()
    await ask(first, user.email)
    code, _ = last_mail(mail_dir, user.email)
    browsers = [await make_client() for _ in range(5)]
    answers = await asyncio.gather(
        *(b.post(VERIFY, json={"email": user.email, "code": code}) for b in browsers)
    )
    assert sorted(a.status for a in answers) == [200, 422, 422, 422, 422]


async def test_the_link_signs_in_once_with_the_magic_link_method(
    client: Any, make_client: Any, factory: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    await ask(client, user.email)
    code, link_token = last_mail(mail_dir, user.email)
    phone = await make_client()
    signed = await data(await phone.post(VERIFY, json={"token": link_token}))
    assert signed["user"]["id"] == str(user.id)
    sessions = await data(await phone.get("/api/v1/auth/sessions"))
    assert [s["method"] for s in sessions] == ["magic_link"]
    # The link and the code of the same mail are one credential: both are spent.
    await error(await phone.post(VERIFY, json={"token": link_token}), 422)
    await error(await client.post(VERIFY, json={"email": user.email, "code": code}), 422)


async def test_a_new_request_ends_the_previous_code(
    client: Any, factory: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    await ask(client, user.email)
    old, old_link = last_mail(mail_dir, user.email)
    await ask(client, user.email)
    new, _ = last_mail(mail_dir, user.email)
    if old != new:  # one chance in a million that the two codes are equal
        await error(await client.post(VERIFY, json={"email": user.email, "code": old}), 422)
    await error(await client.post(VERIFY, json={"token": old_link}), 422)
    await data(await client.post(VERIFY, json={"email": user.email, "code": new}))


async def test_an_expired_code_is_refused(
    client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    user = await factory.user()
    await ask(client, user.email)
    code, link_token = last_mail(mail_dir, user.email)
    await db.execute("UPDATE email_codes SET expires_at = now() - interval '1 second'")
    await error(await client.post(VERIFY, json={"email": user.email, "code": code}), 422)
    await error(await client.post(VERIFY, json={"token": link_token}), 422)


async def test_a_user_with_a_factor_is_asked_for_it(
    make_client: Any, factory: Any, db: Database, settings: Any, mail_dir: Path
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    await ask(browser, user.email)
    code, _ = last_mail(mail_dir, user.email)
    response = await browser.post(VERIFY, json={"email": user.email, "code": code})
    answer = await data(response)
    assert answer["mfaRequired"] is True and "totp" in answer["methods"]
    cookies = set_cookies(response)
    assert "auth_token" not in cookies and cookies["mfa_binding"]["value"]
    assert (await (await browser.get("/api/v1/users/me")).json()) == {"user": None}
    await data(
        await browser.post(
            "/api/v1/auth/mfa/verify", json={"ticket": answer["ticket"], "totp": enrolled.code(+1)}
        )
    )
    assert claims(browser)["amr"] == ["email", "otp"]


async def test_unknown_address_gets_the_same_answer_and_signs_up_verified(
    client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    known = await factory.user()
    same = await ask(client, known.email)
    other = await ask(client, "newcomer@example.com")
    assert same == other
    assert await db.fetch_val("SELECT count(*) FROM users") == 1  # nothing before the code
    code, _ = last_mail(mail_dir, "newcomer@example.com")
    signed = await data(
        await client.post(VERIFY, json={"email": "newcomer@example.com", "code": code})
    )
    assert signed["user"]["email"] == "newcomer@example.com"
    assert signed["user"]["emailVerifiedAt"] is not None
    me = await (await client.get("/api/v1/users/me")).json()
    assert me["hasPasswordLogin"] is False and me["role"] == "owner"


async def test_a_pending_sign_up_is_verified_and_its_unproven_password_dropped(
    client: Any, make_client: Any, db: Database, mail_dir: Path
) -> None:
    """Someone registered the address with a password of their own; the mailbox owner signs
    in by code: the address is verified and that stranger's password cannot be used."""
    stranger = await make_client()
    await data(
        await stranger.post(
            "/auth/register", json={"email": "owner@example.com", "password": "stranger's pick"}
        )
    )
    await ask(client, "owner@example.com")
    code, _ = last_mail(mail_dir, "owner@example.com")
    await data(await client.post(VERIFY, json={"email": "owner@example.com", "code": code}))
    assert (
        await db.fetch_val("SELECT count(*) FROM user_tokens WHERE purpose = 'verify_email'") == 0
    )
    login = await stranger.post(
        "/api/v1/auth/login", json={"email": "owner@example.com", "password": "stranger's pick"}
    )
    await error(login, 401, "INVALID_CREDENTIALS")


async def test_answers_take_the_same_path_for_known_and_unknown_addresses(
    client: Any, factory: Any, services: Any
) -> None:
    """The request only queues a job (same statement for every address): no lookup happens
    before the answer, so its timing tells nothing. Checked by what was queued."""
    known = await factory.user()
    submitted: list[dict[str, Any]] = []
    real_enqueue = services.jobs.enqueue

    async def spy(target: Any, kind: str, *payloads: dict[str, Any], **kw: Any) -> Any:
        submitted.extend(payloads)
        return await real_enqueue(target, kind, *payloads, **kw)

    services.jobs.enqueue = spy
    try:
        await ask(client, known.email)
        await ask(client, "stranger@example.com")
    finally:
        services.jobs.enqueue = real_enqueue
    assert submitted == [
        {"purpose": "email_code", "email": known.email},
        {"purpose": "email_code", "email": "stranger@example.com"},
    ]


async def test_bodies_are_checked(client: Any) -> None:
    await error(await client.post(VERIFY, json={"email": "a@example.com", "code": "12345"}), 422)
    await error(await client.post(VERIFY, json={"email": "a@example.com", "code": "abcdef"}), 422)
    await error(await client.post(VERIFY, json={"email": "a@example.com"}), 422)
    both = {"email": "a@example.com", "code": "123456", "token": "x"}
    await error(await client.post(VERIFY, json=both), 422)
    await error(await client.post(REQUEST, json={"email": "not an address"}), 422)


async def test_verifications_are_also_limited_per_address(
    env: dict[str, str],
    aiohttp_server: Any,
    aiohttp_client: Any,
    migrated: str,
    db: Database,
    factory: Any,
    mail_dir: Path,
) -> None:
    """Beyond five per code: the rate limiter counts every verification of the address, so
    asking for new codes does not buy fresh guesses without end."""
    from tenantd.app.factory import create_app
    from tenantd.app.settings import load_settings

    limited = {**env, "RATE_LIMIT_ENABLED": "true", "RATE_LIMIT_EMAIL_CODE_VERIFY_PER_EMAIL": "7"}
    server = await aiohttp_server(create_app(load_settings(environ=limited), migrated))
    client = await aiohttp_client(server, headers={"Origin": ORIGIN})
    user = await factory.user()
    await ask(client, user.email)
    code, _ = last_mail(mail_dir, user.email)
    for _ in range(7):
        await error(await client.post(VERIFY, json={"email": user.email, "code": wrong(code)}), 422)
    await ask(client, user.email)
    fresh, _ = last_mail(mail_dir, user.email)
    over = await client.post(VERIFY, json={"email": user.email, "code": fresh})
    await error(over, 429, "RATE_LIMITED")
    assert int(over.headers["Retry-After"]) > 0
