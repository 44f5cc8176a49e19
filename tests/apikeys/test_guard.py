"""The API-key guard of server routes: no key 401, a bad or revoked key 401, a key without
the route's scope 403; a browser session never opens a server route and a key never opens a
user route; the acting key reaches the view; last_used_at is written at most once a minute."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tenantd.apikeys import service
from tenantd.apikeys.domain import apikeys_of
from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.errors import ValidationFailed
from tenantd.identity.tokens import token_hash
from tests.apikeys.helpers import bearer, new_key
from tests.factories import Factory
from tests.helpers import ORIGIN, SECRET, data, error, eventually


async def test_a_key_with_the_scope_opens_the_server_route(client: Any, db: Database) -> None:
    key = await new_key(db, "events:read", "notifications:send", name="backend")
    body = await data(await client.get("/test/server/events", headers=bearer(key.token)))
    assert body == {
        "actor": {"type": "api_key", "id": str(key.id)},
        "name": "backend",
        "scopes": ["events:read", "notifications:send"],
    }
    answer = await client.post("/test/server/send", headers=bearer(key.token), json={})
    assert (await data(answer))["actor"]["id"] == str(key.id)


async def test_no_key_is_401(client: Any) -> None:
    failure = await error(await client.get("/test/server/events"), 401, "UNAUTHORIZED")
    assert failure["details"]["reason"] == "missing_api_key"


async def test_a_key_without_the_scope_is_403(client: Any, db: Database) -> None:
    key = await new_key(db, "events:read")
    answer = await client.post("/test/server/send", headers=bearer(key.token), json={})
    failure = await error(answer, 403, "INSUFFICIENT_SCOPE")
    assert failure["details"]["scope"] == "notifications:send"


async def test_hostile_and_wrong_keys_are_401(client: Any, db: Database) -> None:
    key = await new_key(db, "events:read")
    prefix, key_hex, secret = key.token.split("_", 2)
    other = await new_key(db, "events:read")
    flipped = secret[:-1] + ("A" if secret[-1] != "A" else "B")
    hostile = [
        f"Bearer {prefix}_{key_hex}_{flipped}",  # right id, wrong secret
        f"Bearer {prefix}_{uuid.uuid4().hex}_{secret}",  # unknown id
        f"Bearer {prefix}_{key_hex}_{other.token.split('_', 2)[2]}",  # another key's secret
        f"Bearer {key.token}x",  # too long
        f"Bearer {key.token[:-1]}",  # too short
        f"Bearer {key.token.upper()}",
        f"Bearer {key.token} {key.token}",
        f"Basic {key.token}",
        f"Token {key.token}",
        "Bearer",
        "Bearer ",
        "bearer tdk_",
        f"Bearer tdk_{key_hex}_{'%' * 43}",
        f"Bearer tdk_{'g' * 32}_{secret}",
        "Bearer ' OR 1=1 --",
        "Bearer " + "x" * 5000,
    ]
    for header in hostile:
        answer = await client.get("/test/server/events", headers={"Authorization": header})
        failure = await error(answer, 401, "UNAUTHORIZED")
        assert failure["details"]["reason"] == "invalid_api_key", header
    # The lower-case scheme is fine (RFC 7235: case-insensitive).
    answer = await client.get(
        "/test/server/events", headers={"Authorization": f"bearer {key.token}"}
    )
    assert answer.status == 200


async def test_a_session_access_token_as_bearer_is_refused(client: Any, factory: Factory) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    answer = await client.get("/test/server/events", headers=bearer(cookies["auth_token"]))
    assert (await error(answer, 401))["details"]["reason"] == "invalid_api_key"


async def test_a_browser_session_never_opens_a_server_route(
    make_client: Any, factory: Factory
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    assert (await browser.get("/test/user")).status == 200  # the session itself is good
    answer = await browser.get("/test/server/events")
    assert (await error(answer, 401))["details"]["reason"] == "missing_api_key"
    answer = await browser.post("/test/server/send", json={}, headers={"Origin": ORIGIN})
    assert (await error(answer, 401))["details"]["reason"] == "missing_api_key"


async def test_a_key_never_opens_a_user_route(client: Any, db: Database) -> None:
    key = await new_key(db, *service.SCOPES)
    answer = await client.get("/test/user", headers=bearer(key.token))
    assert (await error(answer, 401))["details"]["reason"] == "missing_session"
    answer = await client.get("/api/v1/notifications", headers=bearer(key.token))
    assert (await error(answer, 401))["details"]["reason"] == "missing_session"
    # tryAuth: the key is no credential there either, so the caller is anonymous.
    me = await client.get("/api/v1/users/me", headers=bearer(key.token))
    assert me.status == 200
    assert (await me.json())["user"] is None


async def test_a_revoked_key_is_401(client: Any, db: Database) -> None:
    key = await new_key(db)
    assert (await client.get("/test/server/events", headers=bearer(key.token))).status == 200
    async with db.connection() as conn:
        assert await service.revoke_key(conn, key.id) is True
        assert await service.revoke_key(conn, key.id) is False  # once
    app_db = client.server.app[DOMAINS].db
    async with app_db.connection() as conn:  # a revoked key stays revoked
        assert await service.revoke_key(conn, key.id) is False

    async def refused() -> bool:
        answer = await client.get("/test/server/events", headers=bearer(key.token))
        return answer.status == 401

    await eventually(refused)


async def test_only_a_keyed_hash_is_stored(db: Database) -> None:
    key = await new_key(db, "events:read", "events:read")
    row = await db.fetch_one("SELECT * FROM api_keys WHERE id = %(id)s", {"id": key.id})
    assert row is not None
    assert row["scopes"] == ["events:read"]  # each scope once
    secret = key.token.split("_", 2)[2]
    assert bytes(row["secret_hash"]) == token_hash(SECRET, key.token)
    for value in row.values():
        assert secret not in str(value)
    assert key.token.startswith(f"tdk_{key.id.hex}_")


@pytest.mark.parametrize(
    "scopes", [("events:write",), ("",), (), ("EVENTS:READ",), ("events:read", "admin")]
)
async def test_unknown_or_no_scopes_are_refused(db: Database, scopes: tuple[str, ...]) -> None:
    async with db.transaction() as conn:
        with pytest.raises(ValidationFailed) as caught:
            await service.create_key(conn, secret_key=SECRET, name="x", scopes=scopes)
    assert "scopes" in caught.value.fields
    assert await db.fetch_val("SELECT count(*) FROM api_keys") == 0


@pytest.mark.parametrize("name", ["", "   ", "a" * 101, "line\nbreak", "nul\x00"])
async def test_bad_names_are_refused(db: Database, name: str) -> None:
    async with db.transaction() as conn:
        with pytest.raises(ValidationFailed):
            await service.create_key(conn, secret_key=SECRET, name=name, scopes="events:read")


async def test_last_used_is_written_at_most_once_a_minute(client: Any, db: Database) -> None:
    key = await new_key(db)
    query = "SELECT last_used_at FROM api_keys WHERE id = %(id)s"
    assert await db.fetch_val(query, {"id": key.id}) is None
    assert (await client.get("/test/server/events", headers=bearer(key.token))).status == 200
    first = await db.fetch_val(query, {"id": key.id})
    assert first is not None
    for _ in range(3):
        assert (await client.get("/test/server/events", headers=bearer(key.token))).status == 200
    assert await db.fetch_val(query, {"id": key.id}) == first
    # A minute later (for this process and the table alike) the next use writes it again.
    cache = apikeys_of(client.server.app).cache
    cache._touched[key.id] -= service.TOUCH_EVERY_SECONDS + 1
    await db.execute(
        "UPDATE api_keys SET last_used_at = last_used_at - interval '61 seconds' WHERE id = %(id)s",
        {"id": key.id},
    )
    assert (await client.get("/test/server/events", headers=bearer(key.token))).status == 200
    assert await db.fetch_val(query, {"id": key.id}) > first


async def test_a_cached_key_needs_no_query(client: Any, db: Database) -> None:
    """After the first use the key is answered from the cache: the table can be emptied
    behind the cache's back (no trigger fires on TRUNCATE) and the key still works."""
    key = await new_key(db)
    assert (await client.get("/test/server/events", headers=bearer(key.token))).status == 200
    cache = apikeys_of(client.server.app).cache
    assert cache.get(key.id) is not None
    await db.execute("TRUNCATE api_keys CASCADE")
    assert (await client.get("/test/server/events", headers=bearer(key.token))).status == 200
    # The secret is still checked against the cached hash.
    wrong = key.token[:-2] + ("AA" if not key.token.endswith("AA") else "BB")
    assert (await client.get("/test/server/events", headers=bearer(wrong))).status == 401


async def test_many_concurrent_first_uses(client: Any, db: Database) -> None:
    keys = [await new_key(db, name=f"k{i}") for i in range(5)]
    answers = await asyncio.gather(
        *(
            client.get("/test/server/events", headers=bearer(key.token))
            for key in keys
            for _ in range(10)
        )
    )
    assert [a.status for a in answers] == [200] * 50


async def test_create_and_revoke_are_audited(db: Database) -> None:
    key = await new_key(db, "events:read", name="audited")
    async with db.connection() as conn:
        await service.revoke_key(conn, key.id, revoked_by="cli:ops")
    rows = await db.fetch_all(
        "SELECT action, target, data, actor_user_id FROM audit_log ORDER BY id"
    )
    assert [(r["action"], r["target"]) for r in rows] == [
        ("api_key.created", str(key.id)),
        ("api_key.revoked", str(key.id)),
    ]
    assert rows[1]["data"]["actor"] == {"type": "operator", "id": "cli:ops"}
    assert all(r["actor_user_id"] is None for r in rows)
    assert key.token not in str(rows)
