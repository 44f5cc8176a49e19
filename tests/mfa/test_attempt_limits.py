"""Attempts at a second factor are counted where they are evaluated (issue 25): parallel wrong
codes cannot get more than LOCK_LIMIT evaluations past the lock (item 9), and a WebAuthn
challenge is spent by any attempt, a refused one too (item 15)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenantd.db import Database
from tenantd.errors import RateLimited
from tenantd.identity.errors import InvalidCredentials
from tenantd.identity.settings import IdentitySettings
from tenantd.mfa import service as mfa
from tenantd.mfa import totp
from tenantd.mfa.domain import mfa_of
from tenantd.settings import Settings
from tests.factories import Factory
from tests.helpers import data, error
from tests.mfa.helpers import enrol_totp, signed_in
from tests.mfa.soft_authenticator import SoftAuthenticator

PARALLEL = 40


async def test_parallel_wrong_codes_evaluate_at_most_the_limit(
    make_client: Any,
    factory: Factory,
    db: Database,
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    enrolled = await enrol_totp(browser)
    services = mfa_of(browser.server.app)
    evaluated = 0
    real = totp.matching_step

    def counting(secret: str, code: str) -> int | None:
        nonlocal evaluated
        evaluated += 1
        return real(secret, code)

    monkeypatch.setattr(totp, "matching_step", counting)
    wrong = "000000" if enrolled.code() != "000000" else "111111"
    outcomes = await asyncio.gather(
        *(mfa.check_code(services, user.id, totp_code=wrong) for _ in range(PARALLEL)),
        return_exceptions=True,
    )
    assert all(isinstance(o, InvalidCredentials | RateLimited) for o in outcomes), outcomes
    assert evaluated <= mfa.LOCK_LIMIT, f"{evaluated} of {PARALLEL} wrong codes were evaluated"
    assert sum(isinstance(o, InvalidCredentials) for o in outcomes) == mfa.LOCK_LIMIT - 1
    # Locked now: even the right code is refused, unevaluated.
    with pytest.raises(RateLimited):
        await mfa.check_code(services, user.id, totp_code=enrolled.code())
    assert evaluated <= mfa.LOCK_LIMIT


async def test_a_refused_assertion_spends_its_challenge(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    key = SoftAuthenticator(
        rp_id=settings.section(IdentitySettings).webauthn_rp_id,
        origin=settings.section(IdentitySettings).webauthn_origins[0],
    )
    options = await data(await browser.post("/api/v1/auth/passkeys/register/options"))
    await data(
        await browser.post(
            "/api/v1/auth/passkeys/register/verify", json={"credential": key.create(options)}
        ),
        201,
    )
    options = await data(await browser.post("/api/v1/auth/reauth/passkey-options"))
    await error(
        await browser.post("/api/v1/auth/reauth", json={"passkey": key.get(options, tamper=True)}),
        401,
    )
    # The same challenge, now correctly signed: refused, the failed attempt used it up.
    refused = await error(
        await browser.post("/api/v1/auth/reauth", json={"passkey": key.get(options)}), 401
    )
    assert "challenge" in refused["message"]
    remaining = await db.fetch_val(
        "SELECT count(*) FROM webauthn_challenges WHERE user_id = %(u)s", {"u": user.id}
    )
    assert remaining == 0
    # A new challenge works.
    options = await data(await browser.post("/api/v1/auth/reauth/passkey-options"))
    await data(await browser.post("/api/v1/auth/reauth", json={"passkey": key.get(options)}))
