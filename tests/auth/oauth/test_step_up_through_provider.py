"""Step-up through the provider (GET /api/v1/auth/oauth/{provider}/reauth): a user who signed
in with OpenID Connect proves it is them again at the provider (prompt=login, max_age=0);
the callback refreshes the auth_time of the session that asked (no new session), so a
step-up-protected action then succeeds. Another provider account, a stale provider
authentication or an ended session is refused by name and changes nothing."""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tenantd.db import Database
from tenantd.settings import Settings
from tests.auth.oauth.fake_idp import FakeIdP, FakeUser
from tests.auth.oauth.support import Browser, login_error
from tests.factories import Factory, UserRecord
from tests.helpers import data, error
from tests.mfa.helpers import claims, enrol_totp, signed_in
from tests.ui.test_mfa_pages import post_form, token_in

MAX_AGE = 30
NEW_PASSWORD = {"newPassword": "a brand new passphrase"}


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["REAUTH_MAX_AGE_SECONDS"] = str(MAX_AGE)
    return env


@pytest.fixture
async def user(browser: Browser, db: Database) -> UserRecord:
    """Signed in at the provider once (which created the user: no password, no factor)."""
    assert (await browser.sign_in()).status == 302
    row = await db.fetch_one(
        "SELECT u.id, u.email, m.account_id FROM users u JOIN memberships m ON m.user_id = u.id"
        " WHERE u.email = 'alice@example.org'"
    )
    assert row is not None
    return UserRecord(id=row["id"], email=row["email"], password="", account_id=row["account_id"])


@pytest.fixture
async def stale(
    make_client: Any, idp_session: Any, db: Database, settings: Settings, user: UserRecord
) -> Browser:
    """Another browser of `user` whose session authenticated an hour ago (at the provider)."""
    client = await signed_in(make_client, db, settings, user, auth_age=3600, amr=("fed",))
    return Browser(client, idp_session)


async def _reauth(stale: Browser, return_to: str = "/account?done=reauthed") -> Any:
    started = await stale.client.get(
        "/api/v1/auth/oauth/fake/reauth", params={"returnTo": return_to}, allow_redirects=False
    )
    assert started.status == 302, await started.text()
    return started.headers["Location"]


async def _families(db: Database, user: UserRecord) -> int:
    count: int = await db.fetch_val(
        "SELECT count(DISTINCT family_id) FROM sessions WHERE user_id = %(u)s", {"u": user.id}
    )
    return count


async def test_a_provider_only_user_steps_up_at_the_provider(
    stale: Browser, user: UserRecord, idp: FakeIdP, db: Database
) -> None:
    refused = await error(
        await stale.client.post("/api/v1/auth/password", json=NEW_PASSWORD), 403, "REAUTH_REQUIRED"
    )
    assert refused["details"] == {"methods": ["provider"], "providers": ["fake"]}
    before = claims(stale.client)
    refresh_before = stale.cookie("refresh_token")
    families = await _families(db, user)

    location = await _reauth(stale)
    callback = await stale.callback(await stale.authorize(location))
    asked = idp.authorize_seen[-1]
    assert asked["prompt"] == "login" and asked["max_age"] == "0"
    # An ordinary sign-in asks for neither.
    assert "prompt" not in idp.authorize_seen[0] and "max_age" not in idp.authorize_seen[0]

    assert callback.status == 302 and callback.headers["Location"] == "/account?done=reauthed"
    after = claims(stale.client)
    assert after["sid"] == before["sid"] and after["sub"] == before["sub"]
    assert after["aid"] == before["aid"]
    assert after["auth_time"] > before["auth_time"] + 3000
    assert after["amr"] == ["fed"]
    assert stale.cookie("refresh_token") == refresh_before  # the same session, no new one
    assert await _families(db, user) == families

    # Now the step-up-protected action goes through (the user sets a first password).
    await data(await stale.client.post("/api/v1/auth/password", json=NEW_PASSWORD))
    # And the family keeps the new auth_time across a refresh.
    await data(await stale.client.post("/api/v1/auth/refresh"))
    assert claims(stale.client)["auth_time"] == after["auth_time"]


async def test_another_provider_account_is_refused(
    stale: Browser, idp: FakeIdP, db: Database
) -> None:
    token_before = stale.cookie("auth_token")
    location = await _reauth(stale)
    idp.user = FakeUser(sub="someone-else", email="mallory@example.org")
    callback = await stale.callback(await stale.authorize(location))
    assert login_error(callback) == {"error": "reauth_mismatch"}
    assert stale.cookie("auth_token") == token_before
    # The signed-in browser lands on /login and reads why, in words.
    landed = await stale.client.get(callback.headers["Location"], allow_redirects=False)
    assert landed.status == 200
    assert "That is another account at the provider" in await landed.text()
    await error(
        await stale.client.post("/api/v1/auth/password", json=NEW_PASSWORD), 403, "REAUTH_REQUIRED"
    )
    # Nothing was created for the other account either.
    assert await db.fetch_val("SELECT count(*) FROM users WHERE email = 'mallory@example.org'") == 0


async def test_a_stale_provider_authentication_is_refused(stale: Browser, idp: FakeIdP) -> None:
    """The provider reused its own hour-old session (auth_time before the request)."""
    location = await _reauth(stale)
    idp.claim_overrides["auth_time"] = int(time.time()) - 3600
    callback = await stale.callback(await stale.authorize(location))
    assert login_error(callback) == {"error": "reauth_stale"}
    await error(
        await stale.client.post("/api/v1/auth/password", json=NEW_PASSWORD), 403, "REAUTH_REQUIRED"
    )
    # Without auth_time (the claim is optional for some providers) the step-up counts.
    idp.claim_overrides["auth_time"] = None
    location = await _reauth(stale)
    callback = await stale.callback(await stale.authorize(location))
    assert callback.status == 302 and callback.headers["Location"] == "/account?done=reauthed"
    await data(await stale.client.post("/api/v1/auth/password", json=NEW_PASSWORD))


async def test_a_session_that_ended_meanwhile_is_not_stepped_up(stale: Browser) -> None:
    location = await _reauth(stale)
    await data(await stale.client.post("/api/v1/auth/logout"))
    callback = await stale.callback(await stale.authorize(location))
    assert login_error(callback) == {"error": "reauth_session"}
    assert stale.cookie("auth_token") in (None, "")


async def test_who_may_start_a_step_up_at_a_provider(
    browser: Browser,
    make_client: Any,
    idp_session: Any,
    db: Database,
    settings: Settings,
    factory: Factory,
) -> None:
    anonymous = await browser.client.get("/api/v1/auth/oauth/fake/reauth", allow_redirects=False)
    assert anonymous.status == 401
    # A password user with no identity at the provider: nothing to confirm there.
    member = await factory.user()
    other = await signed_in(make_client, db, settings, member, auth_age=3600)
    await error(
        await other.get("/api/v1/auth/oauth/fake/reauth", allow_redirects=False), 404, "NOT_FOUND"
    )
    refused = await error(
        await other.post(
            "/api/v1/auth/password",
            json={"currentPassword": member.password, "newPassword": "another passphrase"},
        ),
        403,
        "REAUTH_REQUIRED",
    )
    assert refused["details"] == {"methods": ["password"], "providers": []}
    unknown = await other.get("/api/v1/auth/oauth/nope/reauth", allow_redirects=False)
    assert unknown.status == 404


async def test_every_method_of_a_provider_user_with_a_factor_is_listed(
    browser: Browser, stale: Browser
) -> None:
    """TOTP (and a passkey, tested in the browser) steps up as well as the provider."""
    await enrol_totp(browser.client)
    refused = await error(
        await stale.client.post("/api/v1/auth/mfa/recovery-codes/regenerate"),
        403,
        "REAUTH_REQUIRED",
    )
    assert refused["details"] == {"methods": ["totp", "provider"], "providers": ["fake"]}
    # The step-up at the provider of a user with a factor still counts (no ticket, no MFA
    # page: the session already passed its second factor when it signed in).
    location = await _reauth(stale, return_to="/account")
    callback = await stale.callback(await stale.authorize(location))
    assert callback.status == 302 and callback.headers["Location"] == "/account"
    assert parse_qs(urlsplit(callback.headers["Location"]).query) == {}
    codes = await data(await stale.client.post("/api/v1/auth/mfa/recovery-codes/regenerate"))
    assert len(codes["recoveryCodes"]) == 10


async def test_confirm_with_the_provider_on_the_hosted_step_up(
    browser: Browser, stale: Browser
) -> None:
    """The "Confirm it's you" box offers the provider; its button goes there and back."""
    await enrol_totp(browser.client)
    refused = await post_form(stale.client, "/account", "/account/mfa/totp/disable")
    assert refused.status == 403
    page = await refused.text()
    assert 'data-testid="stepup-providers"' in page and "Confirm with Fake" in page
    sent = await stale.client.post(
        "/reauth",
        data={
            "csrf": token_in(page, "/reauth"),
            "back": "/account/mfa/totp/disable",
            "provider": "fake",
        },
        allow_redirects=False,
    )
    assert sent.status == 303
    location = sent.headers["Location"]
    assert location == "/api/v1/auth/oauth/fake/reauth?returnTo=%2Faccount%3Fdone%3Dreauthed"
    started = await stale.client.get(location, allow_redirects=False)
    assert started.status == 302
    callback = await stale.callback(await stale.authorize(started.headers["Location"]))
    assert callback.headers["Location"] == "/account?done=reauthed"
    done = await post_form(stale.client, "/account", "/account/mfa/totp/disable")
    assert done.status == 303 and done.headers["Location"] == "/account?done=totp_off#mfa"
