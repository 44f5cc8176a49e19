"""Digests through the durable queue: sends with one key inside the window become one
notification when the window closes; several instances collect into one digest, and the
digest survives a restart."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenantd.app.bundle import open_services
from tenantd.jobs.runner import JobRunner
from tenantd.notifications import send
from tenantd.notifications.domain import Notifications
from tests.factories import mail_text, read_mails
from tests.helpers import eventually
from tests.notifications.support import EVENT_MODULE, deliveries, quiesce


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_EVENT_MODULES"] = f"{EVENT_MODULE},tests.notifications.beyond_events_fixture"
    return env


async def notifications_of(db: Any, user_id: Any) -> list[Any]:
    return await db.fetch_all(
        "SELECT id, title, body, payload FROM notifications WHERE user_id = %(u)s"
        " ORDER BY created_at",
        {"u": user_id},
    )


async def close_windows(db: Any) -> None:
    """The window is an hour: move the flush jobs to now instead of waiting."""
    await db.execute("UPDATE jobs SET run_at = now() WHERE kind = 'notifications.digest'")


@pytest.mark.parametrize("queues_enabled", [True])
async def test_sends_in_the_window_become_one_notification(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    for n in range(3):
        outcome = await send(
            services, "alert.digest", recipient_user_id=user.id, payload={"topic": "db", "n": n}
        )
        assert outcome.status == "queued"  # the dispatch job adds it to the digest
    await send(services, "alert.digest", recipient_user_id=user.id, payload={"topic": "cpu"})
    await quiesce_dispatch(services.db)
    assert await notifications_of(services.db, user.id) == []
    assert (
        await services.db.fetch_val("SELECT count(*) FROM jobs WHERE kind = 'notifications.digest'")
        == 2
    )
    await close_windows(services.db)
    await quiesce(services)
    rows = {row["title"]: row for row in await notifications_of(services.db, user.id)}
    assert set(rows) == {"3 new: Digest db", "Digest cpu"}
    digest = rows["3 new: Digest db"]
    assert digest["body"].splitlines() == ["Digest db"] * 3
    assert digest["payload"]["_digest"]["count"] == 3
    assert [i["n"] for i in digest["payload"]["_digest"]["items"]] == [0, 1, 2]
    assert await deliveries(services, digest["id"]) == {"in_app": ("sent", None)}
    # The next send opens a new window.
    await send(services, "alert.digest", recipient_user_id=user.id, payload={"topic": "db"})
    await quiesce_dispatch(services.db)
    open_digests = await services.db.fetch_val(
        "SELECT count(*) FROM notification_digests WHERE flushed_at IS NULL"
    )
    assert open_digests == 1


@pytest.mark.parametrize("queues_enabled", [True])
async def test_concurrent_sends_share_one_digest(services: Notifications, factory: Any) -> None:
    user = await factory.user(password=None)
    outcomes = await asyncio.gather(
        *(
            send(
                services, "alert.digest", recipient_user_id=user.id, payload={"topic": "x", "n": n}
            )
            for n in range(8)
        )
    )
    assert len(outcomes) == 8
    await quiesce_dispatch(services.db)  # the flush is not due yet
    assert await services.db.fetch_val("SELECT count(*) FROM notification_digests") == 1
    await close_windows(services.db)
    await quiesce(services)
    [row] = await notifications_of(services.db, user.id)
    assert row["payload"]["_digest"]["count"] == 8


@pytest.mark.parametrize("queues_enabled", [False])
async def test_without_the_queue_a_digest_event_is_sent_at_once(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    outcome = await send(
        services, "alert.digest", recipient_user_id=user.id, payload={"topic": "a"}
    )
    assert outcome.status == "created"


@pytest.mark.parametrize("queues_enabled", [True])
async def test_two_instances_collect_into_one_digest_that_survives_a_restart(
    settings: Any, migrated: str, db: Any, factory: Any
) -> None:
    user = await factory.user(password=None)
    queued = settings.switched("QUEUES_ENABLED", True)
    async with (
        open_services(queued, migrated) as first_bundle,
        open_services(queued, migrated) as second_bundle,
    ):
        first = first_bundle.notifications
        second = second_bundle.notifications
        # No runner in either: the dispatch jobs and the flush job wait in the table.
        for n in range(3):
            await send(
                first, "alert.digest", recipient_user_id=user.id, payload={"topic": "t", "n": n}
            )
            await send(
                second,
                "alert.digest",
                recipient_user_id=user.id,
                payload={"topic": "t", "n": 10 + n},
            )
        # Each instance runs its own dispatch jobs (as its runner would).
        for services in (first, second):
            runner = JobRunner(services)
            await runner.start()
            try:
                await quiesce_dispatch(db)
            finally:
                await runner.stop()
    assert await db.fetch_val("SELECT count(*) FROM notification_digests") == 1
    assert await db.fetch_val("SELECT count(*) FROM notification_digest_items") == 6
    await close_windows(db)
    async with open_services(queued, migrated) as restarted_bundle:  # both instances are gone
        restarted = restarted_bundle.notifications
        runner = JobRunner(restarted)
        await runner.start()
        try:
            rows = await eventually(lambda: notifications_of(db, user.id))
        finally:
            await runner.stop()
    [row] = rows
    assert row["payload"]["_digest"]["count"] == 6
    assert sorted(i["n"] for i in row["payload"]["_digest"]["items"]) == [0, 1, 2, 10, 11, 12]


async def quiesce_dispatch(db: Any) -> None:
    async def done() -> bool:
        left = await db.fetch_val(
            "SELECT count(*) FROM jobs WHERE kind = 'notifications.dispatch'"
            " AND status IN ('queued', 'running')"
        )
        return left == 0

    await eventually(done)


@pytest.mark.parametrize("queues_enabled", [True])
async def test_one_email_renders_the_batch_up_to_max_items(
    services: Notifications, factory: Any, mail_dir: Any
) -> None:
    user = await factory.user(password=None)
    for n in range(3):
        await send(
            services,
            "alert.mailed_digest",
            recipient_user_id=user.id,
            payload={"topic": "disk", "n": n},
        )
    await quiesce_dispatch(services.db)
    await close_windows(services.db)
    await quiesce(services)
    [mail] = read_mails(mail_dir)
    assert mail["Subject"] == "Alerts"
    assert mail_text(mail).split() == ["3", "alerts:", "-", "disk", "0", "-", "disk", "1"]
    [row] = await notifications_of(services.db, user.id)
    assert row["body"].splitlines() == ["Mailed disk", "Mailed disk", "... and 1 more"]
