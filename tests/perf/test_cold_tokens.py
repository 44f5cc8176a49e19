"""A token's first request without a statement (issue 19): the principal cache's per-user token
facts and its mirror of revocations answer what the token-state statement would.

What must hold: a revoked token, an ended session or a removed membership is refused at once
on the instance that made the change and within 100 ms on another; after a lost listener the
mirror answers nothing until it has loaded again."""

from __future__ import annotations

import asyncio
import datetime as dt
import statistics
import time
import uuid
from typing import Any

import pytest
from aiohttp import web

from tenantd.app.factory import create_app
from tenantd.bundle import DOMAINS
from tenantd.cache.invalidation import CHANNEL, live_while_confirmed
from tenantd.db import Database
from tenantd.db.dsn import url_to_dsn
from tenantd.identity import queries
from tenantd.identity.principal_cache import PrincipalCache
from tenantd.identity.revocations import mirrored
from tenantd.identity.revoked import Revocations
from tenantd.identity.tokens import issue_access_token
from tenantd.pubsub import PubSubHub
from tenantd.pubsub.hub import PUBSUB
from tests.cache.test_staleness import FreezableProxy
from tests.factories import wait_until_heard

HEARD_WITHIN = 30.0  # seconds: the bound for "it arrives at all" on a busy machine
LATENCY_SAMPLES = 9
ME = "/api/v1/users/me"


class StatementCounter:
    """Counts the guard's token-state statements (the mirror must make them unneeded)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = queries.token_state

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return await real(*args, **kwargs)

        monkeypatch.setattr(queries, "token_state", counted)


def mirror_ready() -> Revocations:
    mirror = Revocations()
    mirror.finish_load(mirror.begin_load(), [], [])
    return mirror


# the mirror on its own -------------------------------------------------------------------
async def test_mirror_answers_only_once_loaded() -> None:
    mirror = Revocations()
    jti = uuid.uuid4()
    assert mirror.refuses(jti, None) is None
    epoch = mirror.begin_load()
    mirror.revoke_jti(jti)  # heard while the load runs (committed after its snapshot)
    family = uuid.uuid4()
    assert mirror.finish_load(epoch, [], [family])
    assert mirror.refuses(jti, None) is True
    assert mirror.refuses(uuid.uuid4(), family) is True
    assert mirror.refuses(uuid.uuid4(), uuid.uuid4()) is False


async def test_a_load_that_spans_a_gap_is_not_trusted() -> None:
    mirror = mirror_ready()
    asked: list[bool] = []
    mirror.on_stale = lambda: asked.append(True)
    epoch = mirror.begin_load()
    mirror.gap()  # the listener reconnected while the load ran: something may be lost
    assert asked == [True]
    assert mirror.refuses(uuid.uuid4(), None) is None
    assert not mirror.finish_load(epoch, [], [])
    assert mirror.refuses(uuid.uuid4(), None) is None
    assert mirror.finish_load(mirror.begin_load(), [], [])
    assert mirror.refuses(uuid.uuid4(), None) is False


async def test_too_many_revocations_leave_the_mirror_off() -> None:
    mirror = Revocations(max_entries=3)
    assert not mirror.finish_load(mirror.begin_load(), [uuid.uuid4() for _ in range(4)], [])
    assert mirror.refuses(uuid.uuid4(), None) is None


async def test_cache_token_state_needs_facts_and_the_mirror() -> None:
    cache = PrincipalCache()
    cache.enabled = True
    user, account, jti = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    cache.store_facts(user, None, account, "owner", cache.generation)
    assert cache.token_state(user, account, jti, None) is None  # mirror not loaded
    cache.revocations.finish_load(cache.revocations.begin_load(), [], [])
    assert cache.token_state(user, account, jti, None) == (None, False, "owner", False, None)
    assert cache.token_state(user, uuid.uuid4(), jti, None) is None  # role there not known
    cache.apply(f"jti:{jti}")
    assert cache.token_state(user, account, jti, None) == (None, True, "owner", False, None)
    cache.apply(f"user:{user}")  # a membership, password or cutoff change: facts go
    assert cache.token_state(user, account, uuid.uuid4(), None) is None
    generation = cache.generation  # a statement begins
    cache.apply(f"user:{user}")  # ... and a write races it
    cache.store_facts(user, None, account, "owner", generation)
    assert cache.token_state(user, account, uuid.uuid4(), None) is None
    cache.store_facts(user, None, account, "owner", cache.generation)
    cache.enabled = False
    assert cache.token_state(user, account, uuid.uuid4(), None) is None


async def test_overflowing_notices_make_the_mirror_reload() -> None:
    cache = PrincipalCache()
    cache.enabled = True
    cache.revocations.finish_load(cache.revocations.begin_load(), [], [])
    asked: list[bool] = []
    cache.revocations.on_stale = lambda: asked.append(True)
    cache.apply_notices([f"NOTICE:  tenantd_cache:session:{uuid.uuid4()}"] * 60)
    assert asked == [True]
    assert cache.revocations.refuses(uuid.uuid4(), None) is None


# one instance ------------------------------------------------------------------------------
async def test_a_new_token_of_a_known_user_runs_no_statement(
    make_client: Any, factory: Any, app: web.Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    user = await factory.user()
    first = await factory.cookies(user)
    await wait_until_heard(factory.db, app[PUBSUB], CHANNEL)  # the factory's own writes
    counter = StatementCounter(monkeypatch)
    assert (await (await make_client(cookies=first)).get(ME)).status == 200
    assert counter.calls == 1
    second = await factory.cookies(user)  # another sign-in: a session and token never seen
    await wait_until_heard(factory.db, app[PUBSUB], CHANNEL)
    assert (await (await make_client(cookies=second)).get(ME)).status == 200
    assert counter.calls == 1


async def test_logout_refuses_an_unseen_token_of_the_session_at_once(
    make_client: Any, factory: Any, app: web.Application, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's next access token (as a refresh would issue) never reached this
    instance before the logout; the mirror must know the session ended."""
    user = await factory.user()
    issued = await factory.tokens(user)
    await wait_until_heard(factory.db, app[PUBSUB], CHANNEL)  # the factory's own writes
    cookies = {"auth_token": issued.access_token, "refresh_token": issued.refresh_token}
    browser = await make_client(cookies=cookies)
    assert (await browser.get(ME)).status == 200
    unseen, _ = issue_access_token(
        factory.keyring,
        user_id=user.id,
        account_id=user.account_id,
        session_id=issued.access.session_id,
    )
    assert (await browser.post("/api/v1/auth/logout")).status == 200
    counter = StatementCounter(monkeypatch)
    response = await (await make_client(cookies={"auth_token": unseen})).get(ME)
    assert response.status == 401
    assert counter.calls == 0  # refused from memory, not by the statement


async def test_a_revoked_jti_written_elsewhere_is_refused_from_memory(
    make_client: Any,
    factory: Any,
    app: web.Application,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    # The factory's writes announce themselves after commit (the relay): the app hears them
    # before it caches the user's facts, so only the revocation below can change them.
    await wait_until_heard(factory.db, app[PUBSUB], CHANNEL)
    assert (await (await make_client(cookies=cookies)).get(ME)).status == 200
    token, claims = issue_access_token(factory.keyring, user_id=user.id, account_id=user.account_id)
    async with db.connection() as conn:
        await queries.revoke_jti(
            conn, jti=claims.jti, user_id=user.id, expires_at=_at(claims.expires_at)
        )
    await wait_until_heard(factory.db, app[PUBSUB], CHANNEL)
    counter = StatementCounter(monkeypatch)
    assert (await (await make_client(cookies={"auth_token": token})).get(ME)).status == 401
    assert counter.calls == 0


async def test_removed_member_unseen_token_is_refused_at_once(
    make_client: Any, factory: Any, app: web.Application
) -> None:
    owner = await factory.user(plan="team")
    member = await factory.user()
    await factory.member(owner.account_id, member.id, "member")
    member_cookies = await factory.cookies(member, owner.account_id)
    assert (await (await make_client(cookies=member_cookies)).get(ME)).status == 200
    unseen, _ = issue_access_token(factory.keyring, user_id=member.id, account_id=owner.account_id)
    owner_browser = await make_client(cookies=await factory.cookies(owner))
    response = await owner_browser.delete(
        f"/api/v1/accounts/{owner.account_id}/members/{member.id}"
    )
    assert response.status == 200, await response.text()
    assert (await (await make_client(cookies={"auth_token": unseen})).get(ME)).status == 401


async def test_logout_all_refuses_unseen_tokens_at_once(
    make_client: Any, factory: Any, app: web.Application
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    browser = await make_client(cookies=cookies)
    assert (await browser.get(ME)).status == 200
    # Issued before the cutoff, never presented: the user's cutoff must refuse it.
    unseen, _ = issue_access_token(
        factory.keyring, user_id=user.id, account_id=user.account_id, now=time.time() - 1
    )
    assert (await browser.post("/api/v1/auth/logout-all")).status == 200
    assert (await (await make_client(cookies={"auth_token": unseen})).get(ME)).status == 401


# two instances ----------------------------------------------------------------------------
async def test_other_instance_refuses_an_unseen_token_of_an_ended_session(
    make_client: Any, factory: Any, settings: Any, migrated: str, aiohttp_client: Any
) -> None:
    """Logout on instance A; instance B knows the user (facts cached) but has never seen the
    session's newer token: it refuses it once it hears the logout."""
    other = await aiohttp_client(
        create_app(settings, migrated), headers={"Origin": "http://127.0.0.1:8080"}
    )
    user = await factory.user()
    issued = await factory.tokens(user)
    other.session.cookie_jar.update_cookies({"auth_token": issued.access_token})
    assert (await other.get(ME)).status == 200  # B knows this user now
    unseen, _ = issue_access_token(
        factory.keyring,
        user_id=user.id,
        account_id=user.account_id,
        session_id=issued.access.session_id,
    )
    on_a = await make_client(
        cookies={"auth_token": issued.access_token, "refresh_token": issued.refresh_token}
    )
    assert (await on_a.post("/api/v1/auth/logout")).status == 200
    other.session.cookie_jar.clear()
    other.session.cookie_jar.update_cookies({"auth_token": unseen})
    started = time.monotonic()
    while (await other.get(ME)).status == 200:
        assert time.monotonic() - started < HEARD_WITHIN, "the ended session was served on"
    assert other.app[DOMAINS].identity.principal_cache.revocations.ready


async def test_other_instances_mirror_hears_revocations_within_100ms(
    db: Database, factory: Any, migrated: str
) -> None:
    """The mirror of another instance (its own listener) knows a revoked jti and an ended
    session within 100 ms (the median of a series; every one must arrive)."""
    user = await factory.user()
    hub = PubSubHub(url_to_dsn(migrated))
    await hub.start()
    cache = PrincipalCache()
    took: list[float] = []
    try:
        await hub.subscribe(CHANNEL, lambda _c, payload: cache.apply(payload), on_gap=cache.flush)
        cache.live = live_while_confirmed(hub)
        cache.enabled = True
        async with mirrored(db, cache.revocations, hub):
            assert cache.revocations.ready
            for sample in range(LATENCY_SAMPLES):
                # The last sample's invalidations are all heard (a late one would drop the
                # facts stored next: a CI run under load saw it).
                await wait_until_heard(db, hub, CHANNEL)
                cache.store_facts(user.id, None, user.account_id, "owner", cache.generation)
                issued = await factory.tokens(user)
                jti, family = issued.access.jti, issued.access.session_id
                assert cache.token_state(user.id, user.account_id, jti, family) is not None
                started = time.perf_counter()
                async with db.connection() as conn:
                    if sample % 2:
                        await queries.revoke_family(conn, family)
                    else:
                        await queries.revoke_jti(
                            conn,
                            jti=jti,
                            user_id=user.id,
                            expires_at=_at(issued.access.expires_at),
                        )
                while True:
                    state = cache.token_state(user.id, user.account_id, jti, family)
                    if state is not None and state[1]:
                        break
                    assert time.perf_counter() - started < HEARD_WITHIN, "never heard"
                    await asyncio.sleep(0.002)
                took.append(time.perf_counter() - started)
    finally:
        await hub.close()
    assert statistics.median(took) < 0.1, f"revocations took {took} s"


async def test_after_a_lost_listener_the_mirror_answers_only_once_reloaded(
    db: Database, factory: Any, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The listener falls silent (a partition), a session ends meanwhile and its NOTIFY is
    lost. After the reconnect the mirror answers nothing until it has loaded again (the
    load is held back here to look at that window), and then it knows the session ended."""
    user = await factory.user()
    gate = asyncio.Event()
    gate.set()
    real = queries.revocations

    async def held(conn: Any) -> Any:
        await gate.wait()
        return await real(conn)

    monkeypatch.setattr(queries, "revocations", held)
    proxy = FreezableProxy(url_to_dsn(migrated))
    hub = PubSubHub(await proxy.start())
    await hub.start()
    cache = PrincipalCache()
    issued = await factory.tokens(user)
    jti, family = issued.access.jti, issued.access.session_id
    try:
        await hub.subscribe(CHANNEL, lambda _c, payload: cache.apply(payload), on_gap=cache.flush)
        cache.live = live_while_confirmed(hub)
        cache.enabled = True
        async with mirrored(db, cache.revocations, hub):
            await wait_until_heard(db, hub, CHANNEL)  # nothing earlier lands on the facts
            loads = cache.revocations.loads
            cache.store_facts(user.id, None, user.account_id, "owner", cache.generation)
            assert cache.token_state(user.id, user.account_id, jti, family) == (
                None,
                False,
                "owner",
                False,
                None,
            )
            proxy.freeze()
            frozen_at = time.monotonic()
            async with db.connection() as conn:
                await queries.revoke_family(conn, family)
            while cache.serving:  # the silent listener stops the cache within its bound
                assert time.monotonic() - frozen_at < 60, "the cache served on"
                await asyncio.sleep(0.05)
            assert cache.token_state(user.id, user.account_id, jti, family) is None
            gate.clear()
            proxy.thaw()
            while not (hub.reconnects and cache.serving):
                assert time.monotonic() - frozen_at < 60, "the listener never came back"
                await asyncio.sleep(0.01)
            # Connected again, the user's facts known again (as a statement would store
            # them), and the reload held back: the mirror must not answer.
            cache.store_facts(user.id, None, user.account_id, "owner", cache.generation)
            assert not cache.revocations.ready
            assert cache.token_state(user.id, user.account_id, jti, family) is None
            gate.set()
            while cache.token_state(user.id, user.account_id, jti, family) is None:
                assert time.monotonic() - frozen_at < 60, "the mirror never reloaded"
                await asyncio.sleep(0.01)
            state = cache.token_state(user.id, user.account_id, jti, family)
            assert state == (None, True, "owner", False, None)
            assert cache.revocations.loads > loads
    finally:
        gate.set()
        await hub.close()
        await proxy.close()


async def test_a_killed_listener_connection_reloads_the_mirror(
    db: Database, app: web.Application
) -> None:
    """A listener whose connection is ended (server restart, failover) reconnects; the gap
    makes the running app's mirror load again before it answers."""
    hub = app[PUBSUB]
    mirror = app[DOMAINS].identity.principal_cache.revocations
    assert mirror.ready
    loads, reconnects = mirror.loads, hub.reconnects
    pid = hub.backend_pid()
    await db.execute("SELECT pg_terminate_backend(%(p)s)", {"p": pid})
    deadline = time.monotonic() + HEARD_WITHIN
    while hub.reconnects == reconnects or not mirror.ready:
        if hub.reconnects > reconnects and mirror.loads == loads:
            assert not mirror.ready, "answered after a gap without a reload"
        assert time.monotonic() < deadline, "the mirror never reloaded"
        await asyncio.sleep(0.01)
    assert mirror.loads > loads


def _at(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, dt.UTC)
