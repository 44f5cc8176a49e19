"""The routes that read from a replica (DATABASE_REPLICA_URLS, issue 31 part 3): the inbox
list and unread count, the events API, the audit log and the sessions list. Their statements
run on the replica (seen in its pg_stat_activity); a user's own new notification is listed
while the replica's replay is paused; a stopped replica fails no request, and reads go back to
it once it answers. The replica is a pg_basebackup clone of this module's own primary."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tenantd.apikeys.service import create_key
from tenantd.app.factory import create_app
from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.notifications import send
from tenantd.notifications.domain import notifications_of
from tenantd.settings import Settings
from tests.factories import Factory
from tests.helpers import SECRET, eventually
from tests.ops.test_metrics import scrape, value
from tests.replica import ReplicaPair, replica_pair

__all__ = ["replica_pair"]

pytestmark = pytest.mark.slow

INBOX = "/api/v1/notifications"
UNREAD = "/api/v1/notifications/unread-count"
SESSIONS = "/api/v1/auth/sessions"


@pytest.fixture
def env(env: dict[str, str], replica_pair: ReplicaPair) -> dict[str, str]:
    env["DATABASE_URL"] = replica_pair.url
    env["DATABASE_REPLICA_URLS"] = replica_pair.replica_url
    env["DATABASE_REPLICA_WAIT_MS"] = "300"
    return env


@pytest.fixture
async def primary(replica_pair: ReplicaPair) -> AsyncIterator[Database]:
    db = await create_database(url_to_dsn(replica_pair.url), minsize=1, maxsize=3)
    try:
        yield db
    finally:
        await db.close()


@pytest.fixture
async def server(
    primary: Database, settings: Settings, replica_pair: ReplicaPair, aiohttp_server: Any
) -> TestServer:
    app: web.Application = create_app(settings, replica_pair.url)
    return await aiohttp_server(app)


@pytest.fixture
def factory(primary: Database, settings: Settings) -> Factory:
    return Factory(primary, settings)


def ran_on_replica(pair: ReplicaPair, fragment: str) -> bool:
    return any(fragment in statement for statement in pair.replica_statements())


async def stored(primary: Database, user_id: uuid.UUID, count: int) -> bool:
    """Whether the user's in-app notifications are all written (delivery runs after send)."""
    found = await primary.fetch_val(
        "SELECT count(*) FROM notifications WHERE user_id = %(u)s", {"u": user_id}
    )
    return int(found) == count


async def test_lag_tolerant_reads_run_on_the_replica(
    make_client: Any, factory: Factory, app: web.Application, replica_pair: ReplicaPair
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    await send(notifications_of(app), "ping.simple", recipient_user_id=user.id, payload={"n": 1})
    await eventually(lambda: stored(factory.db, user.id, 1))

    page = await (await client.get(INBOX)).json()
    assert [item["title"] for item in page["data"]["items"]] != []
    assert ran_on_replica(replica_pair, "tenantd_inbox_")
    assert (await (await client.get(UNREAD)).json())["data"] == {"count": 1}
    assert ran_on_replica(replica_pair, "tenantd_notification_unread_count")
    sessions = await (await client.get(SESSIONS)).json()
    assert [s["current"] for s in sessions["data"]] == [True]
    assert ran_on_replica(replica_pair, "tenantd_live_sessions")
    audit = await client.get(f"/api/v1/accounts/{user.account_id}/audit-log")
    assert audit.status == 200
    assert ran_on_replica(replica_pair, "audit")

    async with factory.db.connection() as conn:
        key = await create_key(conn, secret_key=SECRET, name="feed", scopes=["events:read"])
    server = await make_client(origin=None)
    events = await server.get("/api/v1/events", headers={"Authorization": f"Bearer {key.token}"})
    assert events.status == 200
    assert ran_on_replica(replica_pair, "outbox_events")


async def test_own_new_notification_is_listed_while_replay_is_paused(
    make_client: Any, factory: Factory, app: web.Application, replica_pair: ReplicaPair
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    await send(notifications_of(app), "ping.simple", recipient_user_id=user.id, payload={"n": 1})
    await eventually(lambda: stored(factory.db, user.id, 1))
    assert (await (await client.get(UNREAD)).json())["data"] == {"count": 1}
    await eventually(replica_pair.caught_up)

    with replica_pair.replay_paused():
        await eventually(
            lambda: (
                replica_pair.query(replica_pair.replica, "SELECT pg_get_wal_replay_pause_state()")
                == "paused"
            )
        )
        await send(
            notifications_of(app), "ping.simple", recipient_user_id=user.id, payload={"n": 2}
        )
        await eventually(lambda: stored(factory.db, user.id, 2))
        on_replica = replica_pair.query(
            replica_pair.replica, f"SELECT count(*) FROM notifications WHERE user_id = '{user.id}'"
        )
        assert on_replica == 1  # the replica has not replayed the new one
        page = await (await client.get(INBOX)).json()
        assert len(page["data"]["items"]) == 2  # waited for the replica, then the primary
        assert (await (await client.get(UNREAD)).json())["data"] == {"count": 2}
        # the user's own writes too: mark everything read, then read the count back
        assert (await client.post(f"{INBOX}/read-all")).status == 200
        assert (await (await client.get(UNREAD)).json())["data"] == {"count": 0}


async def test_a_stopped_replica_fails_no_request_and_is_read_again_when_back(
    make_client: Any, factory: Factory, app: web.Application, replica_pair: ReplicaPair
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    await send(notifications_of(app), "ping.simple", recipient_user_id=user.id, payload={"n": 1})
    await eventually(lambda: stored(factory.db, user.id, 1))
    assert (await client.get(SESSIONS)).status == 200  # a replica connection is pooled

    with replica_pair.replica_stopped():
        for path in (INBOX, UNREAD, SESSIONS, f"/api/v1/accounts/{user.account_id}/audit-log"):
            response = await client.get(path)
            assert response.status == 200, (path, await response.text())
        assert (await (await client.get(UNREAD)).json())["data"] == {"count": 1}
        assert len((await (await client.get(SESSIONS)).json())["data"]) == 1
        samples = await scrape(client)
        assert value(samples, "tenantd_db_replica_reads_total", outcome="failed") >= 1

        async def reported_down() -> bool:
            samples = await scrape(client)
            return value(samples, "tenantd_db_replica_up", replica="0") == 0.0

        await eventually(reported_down)  # its probe found it gone
        before = value(await scrape(client), "tenantd_db_replica_reads_total", outcome="no_replica")
        assert (await client.get(SESSIONS)).status == 200
        after = value(await scrape(client), "tenantd_db_replica_reads_total", outcome="no_replica")
        assert after == before + 1  # skipped: the primary answered without trying it

    async def served_by_replica() -> bool:
        assert (await client.get(SESSIONS)).status == 200
        return ran_on_replica(replica_pair, "tenantd_live_sessions")

    await eventually(served_by_replica)
    assert value(await scrape(client), "tenantd_db_replica_up", replica="0") == 1.0
