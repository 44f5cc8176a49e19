"""OpenID Connect sign-ins in the security log and the sessions list: the provider is the
session's method; linking and unlinking are events of their own."""

from __future__ import annotations

from typing import Any

from tenantd.db import Database
from tests.auth.oauth.support import PROVIDER, Browser
from tests.factories import Factory
from tests.helpers import data


async def events(db: Database) -> list[tuple[str, Any]]:
    rows = await db.fetch_all("SELECT type, data FROM security_events ORDER BY id")
    return [(r["type"], r["data"]) for r in rows]


async def test_provider_sign_in_is_the_sessions_method_and_is_logged(
    browser: Browser, db: Database
) -> None:
    assert (await browser.sign_in()).headers["Location"] == "/"
    [session] = await data(await browser.client.get("/api/v1/auth/sessions"))
    assert session["method"] == PROVIDER and session["current"] is True
    assert await events(db) == [
        ("oauth_linked", {"provider": PROVIDER, "newUser": True}),
        ("signed_in", {"method": PROVIDER, "newBrowser": False}),
    ]


async def test_unlink_is_logged_only_when_it_happens(
    make_client: Any, factory: Factory, db: Database
) -> None:
    user = await factory.user()
    await db.execute(
        "INSERT INTO user_identities (user_id, provider, subject, email)"
        " VALUES (%(u)s, %(p)s, 'sub-1', %(e)s)",
        {"u": user.id, "p": PROVIDER, "e": user.email},
    )
    client = await make_client(cookies=await factory.cookies(user))
    assert (await client.delete(f"/api/v1/auth/oauth/{PROVIDER}")).status == 200
    assert (await client.delete(f"/api/v1/auth/oauth/{PROVIDER}")).status == 404
    assert await events(db) == [("oauth_unlinked", {"provider": PROVIDER})]
