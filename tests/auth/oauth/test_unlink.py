"""Unlinking a provider: only while another way to sign in remains."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp.test_utils import TestClient

from tenantd.db import Database
from tests.auth.oauth.support import PROVIDER, Browser
from tests.factories import Factory, UserRecord


async def link(db: Database, user: UserRecord, provider: str) -> None:
    await db.execute(
        "INSERT INTO user_identities (user_id, provider, subject, email)"
        " VALUES (%(u)s, %(p)s, %(s)s, %(e)s)",
        {"u": user.id, "p": provider, "s": f"{provider}-{user.id}", "e": user.email},
    )


async def identities(db: Database, user: UserRecord) -> list[str]:
    rows = await db.fetch_all(
        "SELECT provider FROM user_identities WHERE user_id = %(u)s ORDER BY provider",
        {"u": user.id},
    )
    return [r["provider"] for r in rows]


async def test_oauth_only_user_cannot_remove_the_last_login(browser: Browser, db: Database) -> None:
    assert (await browser.sign_in()).headers["Location"] == "/"
    response = await browser.client.delete(f"/api/v1/auth/oauth/{PROVIDER}")
    assert response.status == 409
    assert (await response.json())["error"]["code"] == "CONFLICT"
    assert await db.fetch_val("SELECT count(*) FROM user_identities") == 1
    me = await browser.me()
    assert [p["provider"] for p in me["authProviders"]] == [PROVIDER]


async def test_user_with_a_password_can_unlink(
    make_client: Any, factory: Factory, db: Database
) -> None:
    user = await factory.user()
    await link(db, user, PROVIDER)
    client = await make_client(cookies=await factory.cookies(user))
    response = await client.delete(f"/api/v1/auth/oauth/{PROVIDER}")
    assert response.status == 200, await response.text()
    assert (await response.json())["data"] == {}
    assert await identities(db, user) == []
    me = await (await client.get("/api/v1/users/me")).json()
    assert [p["provider"] for p in me["authProviders"]] == ["password"]
    assert me["hasPasswordLogin"] is True


async def test_user_with_another_identity_can_unlink(
    make_client: Any, factory: Factory, db: Database
) -> None:
    user = await factory.user(password=None)
    await link(db, user, PROVIDER)
    await link(db, user, "other")
    client = await make_client(cookies=await factory.cookies(user))
    response = await client.delete(f"/api/v1/auth/oauth/{PROVIDER}")
    assert response.status == 200
    assert await identities(db, user) == ["other"]
    last = await client.delete("/api/v1/auth/oauth/other")
    assert last.status == 409
    assert await identities(db, user) == ["other"]


async def test_unlinking_what_is_not_linked_is_not_found(
    make_client: Any, factory: Factory, db: Database
) -> None:
    user = await factory.user()
    other = await factory.user(password=None)
    await link(db, other, PROVIDER)
    client = await make_client(cookies=await factory.cookies(user))
    response = await client.delete(f"/api/v1/auth/oauth/{PROVIDER}")
    assert response.status == 404
    assert await identities(db, other) == [PROVIDER]  # someone else's identity is untouched


async def test_unlink_requires_a_session_and_an_allowed_origin(
    client: TestClient[Any, Any], make_client: Any, factory: Factory, db: Database
) -> None:
    anonymous = await client.delete(f"/api/v1/auth/oauth/{PROVIDER}")
    assert anonymous.status == 401
    user = await factory.user()
    await link(db, user, PROVIDER)
    cross_site = await make_client(
        cookies=await factory.cookies(user), origin="https://evil.example"
    )
    response = await cross_site.delete(f"/api/v1/auth/oauth/{PROVIDER}")
    assert response.status == 403
    assert await identities(db, user) == [PROVIDER]


async def test_concurrent_unlinks_never_remove_every_login(
    make_client: Any, factory: Factory, db: Database
) -> None:
    for _round in range(5):
        user = await factory.user(password=None)
        await link(db, user, PROVIDER)
        await link(db, user, "other")
        cookies = await factory.cookies(user)
        clients = [await make_client(cookies=cookies) for _ in range(2)]
        responses = await asyncio.gather(
            clients[0].delete(f"/api/v1/auth/oauth/{PROVIDER}"),
            clients[1].delete("/api/v1/auth/oauth/other"),
        )
        assert sorted(r.status for r in responses) == [200, 409]
        assert len(await identities(db, user)) == 1
