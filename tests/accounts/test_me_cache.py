"""The cache of serialised /me bodies (accounts/me.py): dropped by the announcements that can
change a body, fed exactly like the principal cache (tests/identity/test_principal_cache.py),
and a warm /me answers from it without a statement."""

from __future__ import annotations

import uuid
from typing import Any

from aiohttp import web

from tenantd.accounts.me import MeCache
from tenantd.bundle import DOMAINS
from tenantd.cache.invalidation import CHANNEL
from tenantd.identity.principal_cache import PrincipalCache
from tenantd.pubsub.hub import PUBSUB
from tests.factories import wait_until_heard
from tests.identity.test_principal_cache import principal


def enabled() -> tuple[PrincipalCache, MeCache]:
    principals, bodies = PrincipalCache(), MeCache()
    principals.enabled = bodies.enabled = True
    return principals, bodies


async def test_disabled_cache_never_answers() -> None:
    cache = MeCache()
    user = uuid.uuid4()
    cache.store(user, None, b"{}", cache.version())
    assert cache.get(user, None) is None


async def test_invalidations_by_kind() -> None:
    """Both caches hear the same announcements (as the bus and the writer's notices feed
    each): a user's change drops their principal and their body, a revoked token only the
    principal, an account's change every body."""
    cache, me = enabled()
    a, b = principal(uuid.uuid4()), principal(uuid.uuid4())
    for p in (a, b):
        cache.store_principal(p, cache.generation)
        me.store(p.user_id, None, b"{}", me.version())

    def apply(payload: str) -> None:
        cache.apply(payload)
        me.apply(payload)

    apply(f"user:{a.user_id}")
    assert cache.principal(a.jti) is None and me.get(a.user_id, None) is None
    assert cache.principal(b.jti) == b
    apply(f"jti:{b.jti}")
    assert cache.principal(b.jti) is None
    assert me.get(b.user_id, None) == b"{}"
    apply(f"session:{uuid.uuid4()}")
    apply(f"inbox:{b.user_id}")
    assert me.get(b.user_id, None) == b"{}"
    apply(f"account:{uuid.uuid4()}")
    assert me.get(b.user_id, None) is None


async def test_a_load_that_raced_its_users_invalidation_is_not_stored() -> None:
    _, me = enabled()
    user, other = uuid.uuid4(), uuid.uuid4()
    version = me.version()  # a load begins
    me.apply(f"user:{user}")  # a write lands meanwhile
    me.store(user, None, b"old", version)
    assert me.get(user, None) is None
    me.store(other, None, b"{}", version)  # another user's load was not concerned
    assert me.get(other, None) == b"{}"
    version = me.version()
    me.apply("all")
    me.store(user, None, b"old", version)  # nor is one that raced a flush
    assert me.get(user, None) is None


async def test_unreadable_or_too_many_notices_empty_it() -> None:
    _, me = enabled()
    user = uuid.uuid4()
    me.store(user, None, b"{}", me.version())
    me.apply_notices([f"NOTICE:  tenantd_cache:user:{uuid.uuid4()}\n"] * 50)
    assert me.get(user, None) is None
    me.store(user, None, b"{}", me.version())
    me.apply("user:not-a-uuid")
    assert me.get(user, None) is None


async def test_bodies_are_bounded() -> None:
    me = MeCache(max_entries=50)
    me.enabled = True
    for _ in range(500):
        me.store(uuid.uuid4(), None, b"{}", me.version())
    assert len(me) <= 50


async def test_a_warm_me_is_served_from_the_cache_and_a_write_shows_at_once(
    app: web.Application, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    # The factory's rows announce themselves over LISTEN; heard after the first request
    # they would drop what it stored.
    await wait_until_heard(factory.db, app[PUBSUB], CHANNEL)
    first = await (await browser.get("/api/v1/users/me")).json()
    services = app[DOMAINS]
    assert services.accounts.me_cache.get(user.id, user.account_id) is not None
    # This instance's own write: its trigger's notice drops the body before the next request.
    await services.db.execute(
        "UPDATE users SET first_name = 'Renamed' WHERE id = %(u)s", {"u": user.id}
    )
    second = await (await browser.get("/api/v1/users/me")).json()
    assert first["user"]["firstName"] != "Renamed"
    assert second["user"]["firstName"] == "Renamed"
