"""Sign-in with a second factor: tickets (single use, 5 minutes, bound to the browser),
recovery codes (single use, mailed), amr and auth_time in access tokens across refresh."""

from __future__ import annotations

import time
from typing import Any

from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.ops.config import RateLimitSettings
from tenantd.settings import Settings
from tests.factories import Factory, mail_text, read_mails
from tests.helpers import data, error, eventually
from tests.mfa.helpers import claims, cookie, password_step, signed_in, user_with_totp

# The abuse-limit scope of passwordless passkey options (tenantd.mfa.views).
PASSKEY_OPTIONS = "passkey_sign_in_options"


async def test_password_login_of_a_user_without_factor_is_unchanged(
    client: Any, factory: Factory
) -> None:
    user = await factory.user()
    answer = await data(
        await client.post(
            "/api/v1/auth/login", json={"email": user.email, "password": user.password}
        )
    )
    assert answer["user"]["id"] == str(user.id)
    token = claims(client)
    assert token["amr"] == ["pwd"]
    assert abs(token["auth_time"] - time.time()) < 60


async def test_login_with_a_factor_answers_a_ticket_and_no_session(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    response = await browser.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    answer = await data(response)
    assert answer["mfaRequired"] is True
    assert answer["methods"] == ["totp", "recoveryCode"]
    assert len(answer["ticket"]) >= 40
    set_cookies = response.headers.getall("Set-Cookie")
    assert not any(c.startswith(("auth_token=", "refresh_token=")) for c in set_cookies)
    binding = next(c for c in set_cookies if c.startswith("mfa_binding="))
    assert "HttpOnly" in binding and "Max-Age=300" in binding
    assert cookie(browser, "auth_token") is None
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me == {"user": None}
    # A wrong password still says nothing about factors.
    await error(
        await browser.post(
            "/api/v1/auth/login", json={"email": user.email, "password": "nope-nope"}
        ),
        401,
        "INVALID_CREDENTIALS",
    )

    # The second step with a wrong code keeps the ticket; the right one signs in.
    await error(
        await browser.post(
            "/api/v1/auth/mfa/verify", json={"ticket": answer["ticket"], "totp": "000000"}
        ),
        401,
        "INVALID_CREDENTIALS",
    )
    verified = await browser.post(
        "/api/v1/auth/mfa/verify", json={"ticket": answer["ticket"], "totp": enrolled.code(+1)}
    )
    signed = await data(verified)
    assert signed["user"]["id"] == str(user.id)
    token = claims(browser)
    assert token["amr"] == ["pwd", "otp"]
    assert abs(token["auth_time"] - time.time()) < 60
    assert token["aid"] == str(user.account_id)
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["user"]["id"] == str(user.id) and me["user"]["mfaEnabled"] is True
    assert cookie(browser, "mfa_binding") is None  # cleared

    # amr and auth_time survive a refresh (the session family keeps them).
    before = claims(browser)
    await data(await browser.post("/api/v1/auth/refresh"))
    after = claims(browser)
    assert after["jti"] != before["jti"]
    assert after["amr"] == ["pwd", "otp"] and after["auth_time"] == before["auth_time"]


async def test_ticket_is_single_use(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    ticket = (await password_step(browser, user))["ticket"]
    await data(
        await browser.post(
            "/api/v1/auth/mfa/verify",
            json={"ticket": ticket, "recoveryCode": enrolled.recovery_codes[0]},
        )
    )
    again = await error(
        await browser.post(
            "/api/v1/auth/mfa/verify",
            json={"ticket": ticket, "recoveryCode": enrolled.recovery_codes[1]},
        ),
        401,
        "UNAUTHORIZED",
    )
    assert again["details"]["reason"] == "invalid_ticket"


async def test_ticket_expires_after_five_minutes(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    ticket = (await password_step(browser, user))["ticket"]
    row = await db.fetch_one("SELECT created_at, expires_at FROM mfa_tickets")
    assert 299 <= (row["expires_at"] - row["created_at"]).total_seconds() <= 301
    await db.execute("UPDATE mfa_tickets SET expires_at = now() - interval '1 second'")
    await error(
        await browser.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "totp": enrolled.code(+1)}
        ),
        401,
        "UNAUTHORIZED",
    )


async def test_ticket_is_bound_to_the_browser_that_passed_the_password(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    ticket = (await password_step(browser, user))["ticket"]
    thief = await make_client()
    await error(
        await thief.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "totp": enrolled.code(+1)}
        ),
        401,
        "UNAUTHORIZED",
    )
    forged = await make_client(cookies={"mfa_binding": "forged-binding-value"})
    await error(
        await forged.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "totp": enrolled.code(+1)}
        ),
        401,
        "UNAUTHORIZED",
    )
    # The rightful browser still can.
    await data(
        await browser.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "totp": enrolled.code(+1)}
        )
    )


async def test_verify_takes_exactly_one_factor(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    ticket = (await password_step(browser, user))["ticket"]
    await error(await browser.post("/api/v1/auth/mfa/verify", json={"ticket": ticket}), 422)
    await error(
        await browser.post(
            "/api/v1/auth/mfa/verify",
            json={"ticket": ticket, "totp": "123456", "recoveryCode": enrolled.recovery_codes[0]},
        ),
        422,
    )


async def test_recovery_code_works_once_and_the_user_is_mailed(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Any
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    code = enrolled.recovery_codes[3]
    browser = await make_client()
    ticket = (await password_step(browser, user))["ticket"]
    # Spaces and case do not matter.
    await data(
        await browser.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "recoveryCode": f" {code.upper()} "}
        )
    )
    assert claims(browser)["amr"] == ["pwd", "otp"]
    used = await db.fetch_val(
        "SELECT count(*) FROM mfa_recovery_codes WHERE user_id = %(u)s AND used_at IS NOT NULL",
        {"u": user.id},
    )
    assert used == 1
    status = await data(await browser.get("/api/v1/auth/mfa/status"))
    assert status["recoveryCodesRemaining"] == 9

    def notice() -> Any:
        return [
            m
            for m in read_mails(mail_dir)
            if user.email in m["To"] and "recovery code" in m["Subject"]
        ]

    mails = await eventually(notice)
    assert "Recovery codes left: 9" in mail_text(mails[0])

    # The same code a second time is refused.
    other = await make_client()
    ticket = (await password_step(other, user))["ticket"]
    await error(
        await other.post("/api/v1/auth/mfa/verify", json={"ticket": ticket, "recoveryCode": code}),
        401,
        "INVALID_CREDENTIALS",
    )


async def test_recovery_code_mail_respects_suppression(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Any
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider)"
        " VALUES (%(e)s, 'manual', 'manual')",
        {"e": user.email},
    )
    browser = await make_client()
    ticket = (await password_step(browser, user))["ticket"]
    await data(
        await browser.post(
            "/api/v1/auth/mfa/verify",
            json={"ticket": ticket, "recoveryCode": enrolled.recovery_codes[0]},
        )
    )
    await browser.server.app[DOMAINS].jobs.drain(10)
    assert not [m for m in read_mails(mail_dir) if "recovery code" in m["Subject"]]


async def test_regenerating_recovery_codes_needs_step_up_and_retires_the_old_ones(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    stale = await signed_in(make_client, db, settings, user, auth_age=601)
    await error(
        await stale.post("/api/v1/auth/mfa/recovery-codes/regenerate"), 403, "REAUTH_REQUIRED"
    )
    fresh = await signed_in(make_client, db, settings, user)
    new_codes = (await data(await fresh.post("/api/v1/auth/mfa/recovery-codes/regenerate")))[
        "recoveryCodes"
    ]
    assert len(new_codes) == 10 and not set(new_codes) & set(enrolled.recovery_codes)
    browser = await make_client()
    ticket = (await password_step(browser, user))["ticket"]
    await error(
        await browser.post(
            "/api/v1/auth/mfa/verify",
            json={"ticket": ticket, "recoveryCode": enrolled.recovery_codes[0]},
        ),
        401,
    )
    await data(
        await browser.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "recoveryCode": new_codes[0]}
        )
    )


async def test_a_second_factor_sign_in_starts_its_session_like_every_sign_in(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    """The session is listed with its method, the browser gets its device cookie and the
    sign-in lands in the user's security log (as a password-only sign-in would)."""
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    ticket = (await password_step(browser, user))["ticket"]
    await data(
        await browser.post(
            "/api/v1/auth/mfa/verify", json={"ticket": ticket, "totp": enrolled.code(+1)}
        )
    )
    assert cookie(browser, "device_id")
    sessions = await data(await browser.get("/api/v1/auth/sessions"))
    current = next(s for s in sessions if s["current"])
    assert current["method"] == "password"
    events = await data(await browser.get("/api/v1/users/me/security-events"))
    signed_in_events = [e for e in events["items"] if e["type"] == "signed_in"]
    assert signed_in_events and signed_in_events[0]["sessionId"] == str(claims(browser)["sid"])


async def test_passwordless_options_do_not_use_up_the_second_step(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    """Every /login load fetches passwordless passkey options (conditional UI). They have their
    own abuse limit per address: an office's page loads cannot lock that address out of the
    second step of a sign-in, and past their own limit they are refused."""
    user, enrolled = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    ticket = (await password_step(browser, user))["ticket"]
    limits = settings.section(RateLimitSettings)
    loads = max(limits.rule("mfa").per_ip, limits.rule(PASSKEY_OPTIONS).per_ip)
    for _ in range(loads):
        await data(await browser.post("/api/v1/auth/passkeys/authenticate/options", json={}))
    await error(
        await browser.post("/api/v1/auth/passkeys/authenticate/options", json={}),
        429,
        "RATE_LIMITED",
    )
    # The second factor's options (this user has no passkey: not found, not refused) and the
    # second step count apart.
    await error(
        await browser.post("/api/v1/auth/passkeys/authenticate/options", json={"ticket": ticket}),
        404,
        "NOT_FOUND",
    )
    verified = await browser.post(
        "/api/v1/auth/mfa/verify", json={"ticket": ticket, "totp": enrolled.code(+1)}
    )
    assert (await data(verified))["user"]["id"] == str(user.id)
