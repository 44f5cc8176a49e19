"""Step-up: dangerous actions need auth_time at most REAUTH_MAX_AGE_SECONDS old (30 here);
POST /api/v1/auth/reauth refreshes it, and the session family keeps it across refreshes."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tenantd.db import Database
from tenantd.identity import stepup
from tenantd.principal import Principal
from tenantd.settings import Settings
from tests.factories import Factory
from tests.helpers import data, error
from tests.mfa.helpers import claims, enrol_totp, signed_in

MAX_AGE = 30


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["REAUTH_MAX_AGE_SECONDS"] = str(MAX_AGE)
    return env


def test_is_recent_reads_auth_time_against_the_clock() -> None:
    principal = Principal(
        user_id=uuid.uuid4(),
        account_id=None,
        role=None,
        jti=uuid.uuid4(),
        issued_at=1000.0,
        expires_at=1900.0,
        auth_time=1000.0,
    )
    assert stepup.is_recent(principal, 600, now=1600.0)
    assert not stepup.is_recent(principal, 600, now=1601.0)
    # A token without auth_time (issued before MFA existed) is never recent.
    old = Principal(
        user_id=uuid.uuid4(),
        account_id=None,
        role=None,
        jti=uuid.uuid4(),
        issued_at=1000.0,
        expires_at=1900.0,
    )
    assert not stepup.is_recent(old, 10**9)


async def test_password_change_needs_a_recent_authentication(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user, auth_age=MAX_AGE + 5)
    change = {"currentPassword": user.password, "newPassword": "another long passphrase"}
    refused = await error(
        await browser.post("/api/v1/auth/password", json=change), 403, "REAUTH_REQUIRED"
    )
    assert refused["details"]["methods"] == ["password"]

    await error(
        await browser.post("/api/v1/auth/reauth", json={"password": "wrong password"}),
        401,
        "INVALID_CREDENTIALS",
    )
    before = claims(browser)
    answer = await data(await browser.post("/api/v1/auth/reauth", json={"password": user.password}))
    after = claims(browser)
    assert abs(answer["authTime"] - time.time()) < 60
    assert after["auth_time"] == answer["authTime"] > before["auth_time"]
    assert after["sid"] == before["sid"] and after["aid"] == before["aid"]
    assert after["amr"] == ["pwd"]

    # The session family keeps the new auth_time across a refresh.
    await data(await browser.post("/api/v1/auth/refresh"))
    assert claims(browser)["auth_time"] == answer["authTime"]

    await data(await browser.post("/api/v1/auth/password", json=change))
    # The new session keeps the authentication it was changed with.
    assert claims(browser)["auth_time"] == answer["authTime"]


async def test_reauth_with_totp_adds_otp_to_amr(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user()
    # Adding a factor is itself sensitive: enrolled from a fresh session, used from a stale one.
    enrolled = await enrol_totp(await signed_in(make_client, db, settings, user))
    browser = await signed_in(make_client, db, settings, user, auth_age=MAX_AGE + 5)
    refused = await error(
        await browser.post("/api/v1/auth/mfa/recovery-codes/regenerate"), 403, "REAUTH_REQUIRED"
    )
    assert refused["details"]["methods"] == ["password", "totp"]
    answer = await data(await browser.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))
    assert answer["amr"] == ["pwd", "otp"]
    await data(await browser.post("/api/v1/auth/mfa/recovery-codes/regenerate"))


async def test_step_up_expires(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    # Backdate the session's authentication past the limit, then refresh into a new token.
    await db.execute(
        "UPDATE session_auth SET auth_time = now() - make_interval(secs => %(s)s)",
        {"s": MAX_AGE + 1},
    )
    await data(await browser.post("/api/v1/auth/refresh"))
    await error(
        await browser.post(
            "/api/v1/auth/password",
            json={"currentPassword": user.password, "newPassword": "another long passphrase"},
        ),
        403,
        "REAUTH_REQUIRED",
    )


async def test_owner_actions_need_step_up(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    owner = await factory.user(plan="team")
    member = await factory.user()
    assert owner.account_id is not None
    await factory.member(owner.account_id, member.id)
    stale = await signed_in(make_client, db, settings, owner, auth_age=3600)
    account = f"/api/v1/accounts/{owner.account_id}"
    await error(
        await stale.post(f"{account}/transfer-ownership", json={"userId": str(member.id)}),
        403,
        "REAUTH_REQUIRED",
    )
    await error(await stale.delete(account), 403, "REAUTH_REQUIRED")
    await error(await stale.patch(account, json={"requireMfa": True}), 403, "REAUTH_REQUIRED")
    # A rename is not dangerous: no step-up.
    assert (await data(await stale.patch(account, json={"name": "Renamed"})))["name"] == "Renamed"
    await data(await stale.post("/api/v1/auth/reauth", json={"password": owner.password}))
    done = await data(
        await stale.post(f"{account}/transfer-ownership", json={"userId": str(member.id)})
    )
    assert done["owner"]["userId"] == str(member.id)


async def test_a_provider_only_user_is_told_to_sign_in_again(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user(password=None)
    stale = await signed_in(make_client, db, settings, user, auth_age=3600, amr=("fed",))
    refused = await error(
        await stale.post("/api/v1/auth/password", json={"newPassword": "a brand new passphrase"}),
        403,
        "REAUTH_REQUIRED",
    )
    assert refused["details"]["methods"] == []
