"""Refresh tokens of a session family: the reuse interval (several tabs refreshing at once),
reuse detection and its email, logout ending every access token of the session (`sid`), and
one live row per family however often it is renewed."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.identity.principal_cache import PrincipalCache
from tenantd.identity.tokens import new_refresh_token, refresh_token_family
from tenantd.principal import Principal
from tenantd.suppression import service as suppression
from tests.auth.helpers import mail_sent, mails_to, set_cookies
from tests.factories import mail_text
from tests.helpers import ORIGIN, SECRET, access_claims, error_of
from tests.identity.probes import probe_routes

REUSE_NOTICE = "your session was ended because a sign-in token was reused"
REFRESH = "/api/v1/auth/refresh"


@pytest.fixture
def reuse_interval() -> str | None:
    return None  # REFRESH_REUSE_INTERVAL_SECONDS left at its default (10)


@pytest.fixture
def env(env: dict[str, str], reuse_interval: str | None) -> dict[str, str]:
    if reuse_interval is not None:
        env["REFRESH_REUSE_INTERVAL_SECONDS"] = reuse_interval
    return env


# Behaviour *within* the interval is tested with a long one, so a busy machine taking more
# than 10 s over a handful of requests cannot turn a repeat into reuse.
long_interval = pytest.mark.parametrize("reuse_interval", ["300"])


def sid_of(client: Any, cookies: dict[str, dict[str, str]]) -> uuid.UUID | None:
    return access_claims(client, cookies["auth_token"]["value"]).session_id


async def refresh_with(make_client: Any, refresh_token: str) -> Any:
    browser = await make_client(cookies={"refresh_token": refresh_token})
    return await browser.post(REFRESH)


async def family_rows(db: Database) -> list[dict[str, Any]]:
    return await db.fetch_all(
        "SELECT family_id, count(*) AS total,"
        " count(*) FILTER (WHERE rotated_at IS NULL AND revoked_at IS NULL) AS live,"
        " count(*) FILTER (WHERE revoked_at IS NOT NULL) AS revoked"
        " FROM sessions GROUP BY family_id ORDER BY family_id"
    )


async def served_from_cache(browser: Any, app: web.Application, jti: uuid.UUID) -> None:
    """Ask /me until the token's context is cached (a concurrent invalidation may delay it)."""
    cache = app[DOMAINS].identity.principal_cache
    deadline = time.monotonic() + 20
    while True:
        assert (await browser.get("/api/v1/users/me")).status == 200
        if cache.principal(jti) is not None:
            return
        assert time.monotonic() < deadline, "the context was never cached"


def reuse_mails(mail_dir: Path, address: str) -> list[Any]:
    return [m for m in mails_to(mail_dir, address) if REUSE_NOTICE in mail_text(m).lower()]


def test_the_reuse_interval_defaults_to_ten_seconds(env: dict[str, str]) -> None:
    assert load_settings(environ=env).identity.refresh_reuse_interval_seconds == 10


@long_interval
async def test_parallel_refreshes_with_one_cookie_all_succeed_and_the_family_lives(
    make_client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    """Eight tabs answer a 401 at once with the same refresh cookie.

    Defined outcome: every request gets 200 and the SAME successor refresh token (a repeat of
    one rotation), each with its own working access token of the same session; nothing is
    revoked; the family keeps one live row; and every tab's cookie keeps renewing afterwards.
    """
    user = await factory.user()
    cookies = await factory.cookies(user)
    tabs = [await make_client(cookies=cookies) for _ in range(8)]
    responses = await asyncio.gather(*(tab.post(REFRESH) for tab in tabs))
    assert [r.status for r in responses] == [200] * 8, [r.status for r in responses]
    issued = [set_cookies(r) for r in responses]
    successors = {c["refresh_token"]["value"] for c in issued}
    assert len(successors) == 1
    assert cookies["refresh_token"] not in successors
    assert len({c["auth_token"]["value"] for c in issued}) == 8

    [family] = await family_rows(db)
    assert (family["total"], family["live"], family["revoked"]) == (2, 1, 0)
    assert {sid_of(tabs[0], c) for c in issued} == {family["family_id"]}
    for tab in tabs:
        assert (await tab.get("/test/required")).status == 200

    # Afterwards each tab refreshes with the cookie it was given: the first rotates it, the
    # others repeat that rotation; the session is never revoked.
    for tab in tabs:
        again = await tab.post(REFRESH)
        assert again.status == 200, await again.text()
        assert (await tab.get("/test/required")).status == 200
    [family] = await family_rows(db)
    assert (family["total"], family["live"], family["revoked"]) == (2, 1, 0)
    await mail_sent(tabs[0])
    assert reuse_mails(mail_dir, user.email) == []


@long_interval
async def test_a_repeat_within_the_interval_revokes_nothing(
    make_client: Any, factory: Any, db: Database, app: web.Application
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    first = await refresh_with(make_client, cookies["refresh_token"])
    late_tab = await refresh_with(make_client, cookies["refresh_token"])
    assert (first.status, late_tab.status) == (200, 200)
    first_cookies, late_cookies = set_cookies(first), set_cookies(late_tab)
    assert first_cookies["refresh_token"]["value"] == late_cookies["refresh_token"]["value"]
    assert sid_of(app, first_cookies) == sid_of(app, late_cookies)
    assert await db.fetch_val("SELECT count(*) FROM sessions WHERE revoked_at IS NOT NULL") == 0


@long_interval
async def test_a_rotated_token_replayed_after_its_successor_was_used_revokes_and_mails(
    make_client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    bystander = await factory.cookies(user)  # another device: another family
    holder = await make_client(cookies=cookies)
    assert (await holder.post(REFRESH)).status == 200
    assert (await holder.post(REFRESH)).status == 200  # the successor is used
    assert (await holder.get("/api/v1/users/me")).status == 200  # its context is cached
    # Only the live row and the one it replaced are kept: the first token's row is gone, and
    # the token is still known as this family's.
    assert await db.fetch_val("SELECT count(*) FROM sessions") == 3

    replay = await refresh_with(make_client, cookies["refresh_token"])
    assert replay.status == 401
    assert error_of(await replay.json())["details"]["reason"] == "invalid_session"
    # The whole family is ended: refresh and every access token of the session, at once.
    assert (await holder.get("/api/v1/users/me")).status == 401
    assert (await holder.post(REFRESH)).status == 401
    stale = await make_client(cookies={"auth_token": cookies["auth_token"]})
    assert (await stale.get("/test/required")).status == 401
    other_device = await make_client(cookies=bystander)
    assert (await other_device.get("/test/required")).status == 200
    assert (await other_device.post(REFRESH)).status == 200

    await mail_sent(holder)
    assert len(reuse_mails(mail_dir, user.email)) == 1


async def test_a_rotated_token_replayed_after_the_interval_revokes_and_mails(
    make_client: Any, factory: Any, db: Database, mail_dir: Path
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    holder = await make_client(cookies=cookies)
    assert (await holder.post(REFRESH)).status == 200
    # The successor is unused, but the rotation is older than the (default 10 s) interval.
    await db.execute(
        "UPDATE sessions SET rotated_at = rotated_at - interval '11 seconds'"
        " WHERE rotated_at IS NOT NULL"
    )
    replay = await refresh_with(make_client, cookies["refresh_token"])
    assert replay.status == 401
    [family] = await family_rows(db)
    assert family["live"] == 0 and family["revoked"] == family["total"]
    assert (await holder.get("/test/required")).status == 401
    assert (await holder.post(REFRESH)).status == 401
    await mail_sent(holder)
    assert len(reuse_mails(mail_dir, user.email)) == 1

    # A second replay finds the family already ended: no second email.
    assert (await refresh_with(make_client, cookies["refresh_token"])).status == 401
    await mail_sent(holder)
    assert len(reuse_mails(mail_dir, user.email)) == 1


async def test_the_reuse_email_respects_the_suppression_list(
    make_client: Any, factory: Any, db: Database, mail_dir: Path, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="tenantd.email.service")
    user = await factory.user()
    async with db.connection() as conn:
        await suppression.add(conn, user.email, reason="bounce", provider="manual")
    cookies = await factory.cookies(user)
    holder = await make_client(cookies=cookies)
    assert (await holder.post(REFRESH)).status == 200
    assert (await holder.post(REFRESH)).status == 200
    assert (await refresh_with(make_client, cookies["refresh_token"])).status == 401
    assert (await holder.post(REFRESH)).status == 401  # revoked all the same
    await mail_sent(holder)
    assert mails_to(mail_dir, user.email) == []
    # The notice was queued and stopped by the suppression check, not forgotten.
    assert "email to suppressed address skipped" in caplog.messages


def test_a_refresh_token_names_its_family_only_with_our_tag() -> None:
    family = uuid.uuid4()
    token = new_refresh_token(SECRET, family)
    assert refresh_token_family(SECRET, token) == family
    assert refresh_token_family("another-secret-key-0123456789-abcdefghijk", token) is None
    family_part, tag, secret = token.split(".")
    other = new_refresh_token(SECRET, uuid.uuid4())
    forged = [
        f"{other.split('.')[0]}.{tag}.{secret}",  # someone else's family with this tag
        f"{family_part}.{'A' * 22}.{secret}",
        f"{family_part}.{tag}",
        f"{family_part}.{tag}.",
        "not-a-token",
        "",
        "....",
        f"{'!' * 22}.{tag}.{secret}",
        f"{family_part}\x00.{tag}.{secret}",
        "é" * 22 + f".{tag}.{secret}",
    ]
    for hostile in forged:
        assert refresh_token_family(SECRET, hostile) is None, hostile


async def test_a_forged_token_naming_a_family_revokes_nothing(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    family_part, _tag, secret = cookies["refresh_token"].split(".")
    forged = f"{family_part}.{'A' * 22}.{secret[::-1]}"
    assert (await refresh_with(make_client, forged)).status == 401
    assert await db.fetch_val("SELECT count(*) FROM sessions WHERE revoked_at IS NOT NULL") == 0
    assert (await refresh_with(make_client, cookies["refresh_token"])).status == 200


# -- logout ends every access token of the session (sid) --------------------------------------


@long_interval
async def test_logout_ends_every_access_token_of_the_session_at_once(
    make_client: Any, factory: Any, app: web.Application
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)  # access token A0 of a new session
    before = await make_client(cookies={"auth_token": cookies["auth_token"]})
    tab = await make_client(cookies=cookies)
    refreshed = await tab.post(REFRESH)  # access token A1, same session
    assert refreshed.status == 200
    a0_jti = access_claims(app, cookies["auth_token"]).jti
    await served_from_cache(before, app, a0_jti)
    assert (await tab.get("/api/v1/users/me")).status == 200
    cache = app[DOMAINS].identity.principal_cache

    assert (await tab.post("/api/v1/auth/logout")).status == 200  # presents A1 only
    assert cache.principal(a0_jti) is None
    response = await before.get("/api/v1/users/me")
    assert response.status == 401
    assert error_of(await response.json())["details"]["reason"] == "invalid_session"
    assert (await before.get("/test/required")).status == 401
    a1 = set_cookies(refreshed)
    assert sid_of(app, a1) == access_claims(app, cookies["auth_token"]).session_id


def test_the_cache_drops_exactly_the_ended_sessions_tokens() -> None:
    cache = PrincipalCache(max_entries=3)
    cache.enabled = True
    user, session, other_session = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()

    def stored(session_id: uuid.UUID | None) -> Principal:
        principal = Principal(
            user_id=user,
            account_id=None,
            role=None,
            jti=uuid.uuid4(),
            issued_at=time.time(),
            expires_at=time.time() + 60,
            session_id=session_id,
        )
        cache.store_principal(principal, cache.generation)
        return principal

    first, second, elsewhere = stored(session), stored(session), stored(other_session)
    cache.apply(f"tenantd_cache:session:{session}")
    assert cache.principal(first.jti) is None and cache.principal(second.jti) is None
    assert cache.principal(elsewhere.jti) == elsewhere
    # Tokens that left the cache (evicted, or with their user) leave the session index too.
    for _ in range(3):
        stored(session)
    cache.invalidate_user(user)
    assert cache._jtis_by_session == {} and cache._jtis_by_user == {}


async def test_logout_ends_the_sessions_tokens_on_another_instance(
    make_client: Any, factory: Any, settings: Any, migrated: str, aiohttp_client: Any
) -> None:
    """Instance B has A0 cached; logout on A with A1 (same session) reaches B by NOTIFY."""
    other = await aiohttp_client(
        create_app(settings, migrated, extra_routes=[probe_routes]), headers={"Origin": ORIGIN}
    )
    user = await factory.user()
    cookies = await factory.cookies(user)
    other.session.cookie_jar.update_cookies({"auth_token": cookies["auth_token"]})
    a0_jti = access_claims(other, cookies["auth_token"]).jti
    await served_from_cache(other, other.server.app, a0_jti)
    other_cache = other.server.app[DOMAINS].identity.principal_cache

    tab = await make_client(cookies=cookies)
    assert (await tab.post(REFRESH)).status == 200
    assert (await tab.post("/api/v1/auth/logout")).status == 200
    deadline = time.monotonic() + 20  # generous: the machine may be busy
    while (await other.get("/api/v1/users/me")).status == 200:
        assert time.monotonic() < deadline, "instance B still serves an ended session's token"
        await asyncio.sleep(0.05)
    assert other_cache.principal(a0_jti) is None


# -- one live row per family --------------------------------------------------------------------


async def test_many_refreshes_keep_one_live_row_per_family(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    laptop = await make_client(cookies=await factory.cookies(user))
    phone = await make_client(cookies=await factory.cookies(user))
    for _ in range(12):
        for browser in (laptop, phone):
            response = await browser.post(REFRESH)
            assert response.status == 200, await response.text()
    families = await family_rows(db)
    assert len(families) == 2
    for family in families:
        # The live row, and the one it replaced (kept for the reuse interval): no pile-up.
        assert (family["total"], family["live"], family["revoked"]) == (2, 1, 0), family
    for browser in (laptop, phone):
        assert (await browser.get("/test/required")).status == 200
