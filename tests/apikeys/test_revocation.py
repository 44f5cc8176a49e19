"""A revoked key is refused at once by the instance that revoked it and within 100 ms by
every other instance on the same database (the cache hears the trigger's NOTIFY); the CLI's
revocation reaches running servers the same way."""

from __future__ import annotations

import time
from typing import Any

from aiohttp.test_utils import TestServer

from tenantd.apikeys import queries, service
from tenantd.apikeys.cache import ApiKeyCache
from tenantd.apikeys.domain import apikeys_of
from tenantd.bundle import DOMAINS
from tenantd.cache.invalidation import CHANNEL
from tenantd.db import Database
from tenantd.pubsub.hub import PUBSUB
from tenantd.settings import Settings
from tests.apikeys.helpers import bearer, new_key, probe_app
from tests.factories import run_tenantd, wait_until_heard
from tests.helpers import eventually

ROUTE = "/test/server/events"


async def two_clients(settings: Settings, migrated: str, aiohttp_client: Any) -> list[Any]:
    return [await aiohttp_client(TestServer(probe_app(settings, migrated))) for _ in range(2)]


async def warm(client: Any, db: Database, token: str, key_id: Any) -> None:
    """Use the key so the instance caches it, after every earlier write was heard."""
    await wait_until_heard(db, client.server.app[PUBSUB], CHANNEL)
    assert (await client.get(ROUTE, headers=bearer(token))).status == 200
    cache = apikeys_of(client.server.app).cache
    assert cache.get(key_id) is not None
    assert cache.verified(token) is not None  # the next use is the memo's


async def test_revoked_at_once_here_and_within_100_ms_elsewhere(
    db: Database, settings: Settings, migrated: str, aiohttp_client: Any
) -> None:
    here, elsewhere = await two_clients(settings, migrated, aiohttp_client)
    key = await new_key(db)
    await warm(here, db, key.token, key.id)
    await warm(elsewhere, db, key.token, key.id)
    other_cache = apikeys_of(elsewhere.server.app).cache

    async with here.server.app[DOMAINS].db.connection() as conn:
        assert await service.revoke_key(conn, key.id)
    committed = time.monotonic()
    # The revoking instance: the very next request, no waiting.
    assert (await here.get(ROUTE, headers=bearer(key.token))).status == 401
    # The other one: its cache drops the key when the NOTIFY arrives.
    await eventually(lambda: other_cache.get(key.id) is None, within=5, interval=0.002)
    heard_after = time.monotonic() - committed
    assert heard_after < 0.1, f"the other instance heard the revocation after {heard_after:.3f}s"
    assert (await elsewhere.get(ROUTE, headers=bearer(key.token))).status == 401


async def test_a_cli_revocation_reaches_running_servers(
    db: Database,
    env: dict[str, str],
    settings: Settings,
    migrated: str,
    aiohttp_client: Any,
) -> None:
    clients = await two_clients(settings, migrated, aiohttp_client)
    key = await new_key(db)
    for client in clients:
        await warm(client, db, key.token, key.id)
    code, _, err = await run_tenantd(env, "api-keys", "revoke", str(key.id))
    assert code == 0, err
    for client in clients:
        # The revoke committed before the process exited: the NOTIFY is on its way.
        cache = apikeys_of(client.server.app).cache
        await eventually(lambda cache=cache: cache.get(key.id) is None, within=5)
        assert (await client.get(ROUTE, headers=bearer(key.token))).status == 401


async def test_a_lookup_that_raced_a_revocation_is_not_cached(db: Database) -> None:
    """The generation rule: a row read before an invalidation is not stored after it."""
    key = await new_key(db)
    cache = ApiKeyCache()
    cache.enabled = True
    generation = cache.generation
    row = await db.fetch_one(queries.KEY_BY_ID.sql, {"id": key.id})
    assert row is not None
    cache.apply(f"apikey:{key.id}")  # the revocation's NOTIFY arrives meanwhile
    cache.store(service.known_key(row), generation)
    assert cache.get(key.id) is None


async def test_the_cache_is_off_while_its_listener_is_not_confirmed(
    client: Any, db: Database
) -> None:
    key = await new_key(db)
    assert (await client.get(ROUTE, headers=bearer(key.token))).status == 200
    cache = apikeys_of(client.server.app).cache
    assert cache.get(key.id) is not None
    cache.live = lambda: False  # the listen connection died silently
    assert cache.get(key.id) is None
    async with db.connection() as conn:
        await service.revoke_key(conn, key.id)
    # Nothing is served from memory: the revocation is read from the table.
    assert (await client.get(ROUTE, headers=bearer(key.token))).status == 401


async def test_a_verified_token_answers_only_while_its_row_is_cached(db: Database) -> None:
    """The memo of verified tokens never outlives the cached row it was checked against:
    an invalidation, a flush or a new row for the key (secret or scopes changed) ends it."""
    key = await new_key(db)
    cache = ApiKeyCache()
    cache.enabled = True
    row = await db.fetch_one(queries.KEY_BY_ID.sql, {"id": key.id})
    assert row is not None
    known = service.known_key(row)
    cache.store(known, cache.generation)
    cache.remember(key.token, known)
    assert cache.verified(key.token) is known
    cache.apply(f"apikey:{key.id}")
    assert cache.verified(key.token) is None
    cache.store(known, cache.generation)
    assert cache.verified(key.token) is known  # the same row cached again
    replaced = service.known_key(row)
    cache.store(replaced, cache.generation)
    assert cache.verified(key.token) is None  # checked against the old row only
    cache.remember(key.token, known)  # not the row cached now: not kept
    assert cache.verified(key.token) is None
    cache.remember(key.token, replaced)
    cache.flush()
    assert cache.verified(key.token) is None
    cache.store(replaced, cache.generation)
    assert cache.verified(key.token) is None  # a flush forgets the tokens too
    cache.remember(key.token, replaced)
    cache.live = lambda: False
    assert cache.verified(key.token) is None


async def test_a_wrong_secret_is_refused_and_never_remembered(client: Any, db: Database) -> None:
    key = await new_key(db)
    assert (await client.get(ROUTE, headers=bearer(key.token))).status == 200
    cache = apikeys_of(client.server.app).cache
    prefix, _, secret = key.token.rpartition("_")
    forged = f"{prefix}_{'A' * len(secret)}"
    for _ in range(2):
        assert (await client.get(ROUTE, headers=bearer(forged))).status == 401
        assert cache.verified(forged) is None
    assert cache.verified(key.token) is not None


async def test_an_announcement_of_lost_invalidations_empties_the_cache(db: Database) -> None:
    """`all` (a writer whose notices overflowed, published on the bus) or an unreadable key
    id: which key changed is unknown, so no cached row is trusted; other kinds are not ours."""
    key = await new_key(db)
    row = await db.fetch_one(queries.KEY_BY_ID.sql, {"id": key.id})
    assert row is not None
    cache = ApiKeyCache()
    cache.enabled = True
    for payload, kept in [(f"user:{key.id}", True), ("all", False), ("apikey:bad", False)]:
        cache.store(service.known_key(row), cache.generation)
        cache.apply(payload)
        assert (cache.get(key.id) is not None) is kept, payload
