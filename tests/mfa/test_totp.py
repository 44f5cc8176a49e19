"""TOTP: enrolment, encryption at rest, codes accepted once, the lockout across instances."""

from __future__ import annotations

import asyncio
from typing import Any

import pyotp

from tenantd import crypto
from tenantd.app.factory import create_app
from tenantd.db import Database
from tenantd.mfa.totp import TOTP_SECRET_INFO
from tenantd.settings import Settings
from tests.factories import Factory
from tests.helpers import SECRET, data, error
from tests.mfa.helpers import enrol_totp, signed_in


async def test_setup_confirm_enables_totp_and_gives_ten_recovery_codes(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    before = await data(await browser.get("/api/v1/auth/mfa/status"))
    assert before == {"enabled": False, "methods": [], "recoveryCodesRemaining": 0}

    setup = await data(await browser.post("/api/v1/auth/mfa/totp/setup"))
    assert pyotp.parse_uri(setup["otpauthUri"]).secret == setup["secret"]
    # Not enabled until a code from it is confirmed; a wrong code does not enable it.
    await error(
        await browser.post("/api/v1/auth/mfa/totp/confirm", json={"code": "000000"}),
        401,
        "INVALID_CREDENTIALS",
    )
    assert (await data(await browser.get("/api/v1/auth/mfa/status")))["enabled"] is False
    code = pyotp.TOTP(setup["secret"]).now()
    confirmed = await data(await browser.post("/api/v1/auth/mfa/totp/confirm", json={"code": code}))
    codes = confirmed["recoveryCodes"]
    assert len(codes) == 10 and len(set(codes)) == 10
    status = await data(await browser.get("/api/v1/auth/mfa/status"))
    assert status == {
        "enabled": True,
        "methods": ["totp", "recoveryCode"],
        "recoveryCodesRemaining": 10,
    }
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["user"]["mfaEnabled"] is True

    # At rest: AES-GCM ciphertext, not the base32 secret; it opens only with the server key
    # and only for this user (associated data).
    row = await db.fetch_one("SELECT * FROM mfa_totp WHERE user_id = %(u)s", {"u": user.id})
    blob = bytes(row["secret_encrypted"])
    assert setup["secret"].encode() not in blob
    opened = crypto.unseal(SECRET, TOTP_SECRET_INFO, blob, associated=user.id.bytes)
    assert opened.decode() == setup["secret"]
    other = await factory.user()
    try:
        crypto.unseal(SECRET, TOTP_SECRET_INFO, blob, associated=other.id.bytes)
    except crypto.UndecryptableSecret:
        pass
    else:
        raise AssertionError("a secret opened for another user")
    # Recovery codes are stored as hashes only.
    stored = await db.fetch_all(
        "SELECT code_hash FROM mfa_recovery_codes WHERE user_id = %(u)s", {"u": user.id}
    )
    assert len(stored) == 10
    assert not any(
        c.replace("-", "").encode() in bytes(r["code_hash"]) for c in codes for r in stored
    )

    # A second setup while enabled is refused.
    await error(await browser.post("/api/v1/auth/mfa/totp/setup"), 409, "CONFLICT")


async def test_a_code_is_accepted_once(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    enrolled = await enrol_totp(browser)
    # The confirming code's step is used up: the same code again is a replay.
    replay = enrolled.code()
    await error(
        await browser.post("/api/v1/auth/reauth", json={"totp": replay}), 401, "INVALID_CREDENTIALS"
    )
    # The next step's code (within the one-step drift) works once, then is a replay too.
    fresh = enrolled.code(+1)
    await data(await browser.post("/api/v1/auth/reauth", json={"totp": fresh}))
    await error(
        await browser.post("/api/v1/auth/reauth", json={"totp": fresh}), 401, "INVALID_CREDENTIALS"
    )
    # A code two steps away is outside the drift window.
    await error(
        await browser.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+3)}),
        401,
        "INVALID_CREDENTIALS",
    )


async def test_one_code_sent_to_two_instances_at_once_is_accepted_once(
    make_client: Any,
    factory: Factory,
    db: Database,
    settings: Settings,
    migrated: str,
    aiohttp_server: Any,
    aiohttp_client: Any,
) -> None:
    user = await factory.user()
    first = await signed_in(make_client, db, settings, user)
    enrolled = await enrol_totp(first)
    other = await aiohttp_server(create_app(settings, migrated))
    second = await aiohttp_client(other, headers={"Origin": settings.web.allowed_origins[0]})
    second.session.cookie_jar.update_cookies(
        {k.key: k.value for k in first.session.cookie_jar}, response_url=second.make_url("/")
    )
    code = enrolled.code(+1)
    answers = await asyncio.gather(
        first.post("/api/v1/auth/reauth", json={"totp": code}),
        second.post("/api/v1/auth/reauth", json={"totp": code}),
    )
    assert sorted(a.status for a in answers) == [200, 401]


async def test_five_wrong_codes_lock_totp_across_instances(
    make_client: Any,
    factory: Factory,
    db: Database,
    settings: Settings,
    migrated: str,
    aiohttp_server: Any,
    aiohttp_client: Any,
) -> None:
    user = await factory.user()
    first = await signed_in(make_client, db, settings, user)
    enrolled = await enrol_totp(first)
    other = await aiohttp_server(create_app(settings, migrated))
    second = await aiohttp_client(other, headers={"Origin": settings.web.allowed_origins[0]})
    second.session.cookie_jar.update_cookies(
        {k.key: k.value for k in first.session.cookie_jar}, response_url=second.make_url("/")
    )
    good = enrolled.code(+1)
    wrong = "000000" if good != "000000" else "111111"
    for attempt in range(4):
        browser = first if attempt % 2 == 0 else second
        await error(
            await browser.post("/api/v1/auth/reauth", json={"totp": wrong}),
            401,
            "INVALID_CREDENTIALS",
        )
    # The fifth wrong code (on the other instance) locks the codes ...
    locked = await second.post("/api/v1/auth/reauth", json={"totp": wrong})
    body = await error(locked, 429, "RATE_LIMITED")
    assert 800 < body["details"]["retryAfter"] <= 900
    assert 800 < int(locked.headers["Retry-After"]) <= 900
    # ... for everyone, on every instance, even with the right code.
    await error(await first.post("/api/v1/auth/reauth", json={"totp": good}), 429, "RATE_LIMITED")
    await error(await second.post("/api/v1/auth/reauth", json={"totp": good}), 429, "RATE_LIMITED")
    # When the lock ends, the right code works again.
    await db.execute(
        "UPDATE mfa_failures SET locked_until = now() - interval '1 second' WHERE user_id = %(u)s",
        {"u": user.id},
    )
    await data(await first.post("/api/v1/auth/reauth", json={"totp": good}))


async def test_wrong_codes_spread_over_more_than_15_minutes_do_not_lock(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    enrolled = await enrol_totp(browser)
    for _ in range(4):
        await error(await browser.post("/api/v1/auth/reauth", json={"totp": "000001"}), 401)
    # The window started 16 minutes ago: the next wrong code starts a new window.
    await db.execute(
        "UPDATE mfa_failures SET window_start = now() - interval '16 minutes'"
        " WHERE user_id = %(u)s",
        {"u": user.id},
    )
    await error(await browser.post("/api/v1/auth/reauth", json={"totp": "000001"}), 401)
    await data(await browser.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))


async def test_removing_totp_needs_step_up_and_takes_the_recovery_codes(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user()
    # Adding a factor is itself sensitive: enrolled from a fresh session, removed from a stale one.
    enrolled = await enrol_totp(await signed_in(make_client, db, settings, user))
    stale = await signed_in(make_client, db, settings, user, auth_age=3600)
    refused = await error(await stale.delete("/api/v1/auth/mfa/totp"), 403, "REAUTH_REQUIRED")
    assert refused["details"]["methods"] == ["password", "totp"]
    await data(await stale.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))
    await data(await stale.delete("/api/v1/auth/mfa/totp"))
    assert await data(await stale.get("/api/v1/auth/mfa/status")) == {
        "enabled": False,
        "methods": [],
        "recoveryCodesRemaining": 0,
    }
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM mfa_recovery_codes WHERE user_id = %(u)s", {"u": user.id}
        )
        == 0
    )
