"""Digested sends keep the instant path's rules: dedup (a held key is not collected twice),
throttle (over the limit: recorded with every delivery `suppressed`, `throttled`), also when
the sends race; and a digest lists its items in send order, whatever order the dispatch
jobs ran in."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenantd.app.bundle import open_services
from tenantd.jobs.kinds import JobInfo
from tenantd.jobs.runner import JobRunner
from tenantd.notifications import send
from tenantd.notifications.domain import Notifications
from tenantd.notifications.jobs import run_dispatch
from tests.helpers import eventually
from tests.notifications.support import EVENT_MODULE, deliveries, quiesce

QUEUED = pytest.mark.parametrize("queues_enabled", [True])


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_EVENT_MODULES"] = f"{EVENT_MODULE},tests.notifications.digest_rules_fixture"
    return env


async def quiesce_dispatch(db: Any) -> None:
    """The dispatch jobs ran (the digest flush is due in an hour, so it still waits)."""

    async def done() -> bool:
        left = await db.fetch_val(
            "SELECT count(*) FROM jobs WHERE kind = 'notifications.dispatch'"
            " AND status IN ('queued', 'running')"
        )
        return left == 0

    await eventually(done)


async def collected(db: Any) -> list[int]:
    """The digest items' `n`, in the order the digest lists them."""
    [digest] = await db.fetch_all("SELECT id FROM notification_digests")
    rows = await db.fetch_all(
        "SELECT payload FROM notification_digest_items WHERE digest_id = %(d)s"
        " ORDER BY send_sequence NULLS LAST, created_at, item_id",
        {"d": digest["id"]},
    )
    return [row["payload"]["n"] for row in rows]


async def flush(services: Notifications, user_id: Any) -> dict[str, Any]:
    """Close the window now and return the digest notification."""
    await services.db.execute("UPDATE jobs SET run_at = now() WHERE kind = 'notifications.digest'")
    await quiesce(services)
    row = await services.db.fetch_one(
        "SELECT id, payload FROM notifications WHERE user_id = %(u)s AND in_app", {"u": user_id}
    )
    assert row is not None
    return dict(row)


async def throttled_records(db: Any, user_id: Any) -> list[Any]:
    return await db.fetch_all(
        "SELECT n.id, n.in_app, d.channel, d.status, d.reason FROM notifications n"
        " JOIN notification_deliveries d ON d.notification_id = n.id"
        " WHERE n.user_id = %(u)s AND d.reason = 'throttled'",
        {"u": user_id},
    )


@QUEUED
async def test_a_digested_send_with_a_held_dedup_key_is_not_collected_twice(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    for n in (1, 1, 2, 1):
        await send(
            services,
            "rules.deduped_digest",
            recipient_user_id=user.id,
            payload={"topic": "t", "n": n},
        )
        # Each send's dispatch before the next, so the first send of a key is the one that
        # holds it (dispatch jobs that run at once race for it: the test below).
        await quiesce_dispatch(services.db)
    assert await collected(services.db) == [1, 2]
    digest = await flush(services, user.id)
    assert digest["payload"]["_digest"]["count"] == 2


@QUEUED
async def test_concurrent_digested_sends_of_one_dedup_key_collect_once(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    await asyncio.gather(
        *(
            send(
                services,
                "rules.deduped_digest",
                recipient_user_id=user.id,
                payload={"topic": "t", "n": 7},
            )
            for _ in range(8)
        )
    )
    await quiesce_dispatch(services.db)
    assert await collected(services.db) == [7]


@QUEUED
async def test_digested_sends_over_the_throttle_limit_are_suppressed_as_throttled(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    for n in range(5):
        await send(
            services,
            "rules.throttled_digest",
            recipient_user_id=user.id,
            payload={"topic": "t", "n": n},
        )
    await quiesce_dispatch(services.db)
    # Queued sends are counted as their jobs run, and the runner may run two at once: which
    # two are dropped is not fixed, how many is.
    kept = await collected(services.db)
    assert len(kept) == 3 and set(kept) < set(range(5))
    dropped = await throttled_records(services.db, user.id)
    assert [(r["in_app"], r["channel"], r["status"]) for r in dropped] == [
        (False, "in_app", "suppressed")
    ] * 2
    assert await deliveries(services, dropped[0]["id"]) == {"in_app": ("suppressed", "throttled")}
    # The digest carries the three that went through; the inbox shows only the digest.
    digest = await flush(services, user.id)
    assert [i["n"] for i in digest["payload"]["_digest"]["items"]] == sorted(kept)


@QUEUED
async def test_concurrent_digested_sends_count_against_the_throttle_exactly_once_each(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    await asyncio.gather(
        *(
            send(
                services,
                "rules.throttled_digest",
                recipient_user_id=user.id,
                payload={"topic": "t", "n": n},
            )
            for n in range(10)
        )
    )
    await quiesce_dispatch(services.db)
    assert len(await collected(services.db)) == 3
    assert len(await throttled_records(services.db, user.id)) == 7
    count = await services.db.fetch_val(
        "SELECT count FROM notification_throttles WHERE throttle_key LIKE 'rules.%%'"
    )
    assert count == 10


@QUEUED
async def test_a_digest_lists_items_in_send_order_when_the_jobs_run_in_reverse(
    settings: Any, migrated: str, db: Any, factory: Any
) -> None:
    user = await factory.user(password=None)
    queued = settings.switched("QUEUES_ENABLED", True)

    def item(n: int) -> dict[str, Any]:
        return {"topic": "t", "n": n}

    async with (
        open_services(queued, migrated) as first_bundle,
        open_services(queued, migrated) as second_bundle,
    ):
        first = first_bundle.notifications
        second = second_bundle.notifications
        # No runner yet: the dispatch jobs wait in the table.
        await send(first, "rules.deduped_digest", recipient_user_id=user.id, payload=item(0))
        await send(second, "rules.deduped_digest", recipient_user_id=user.id, payload=item(1))
        # Two concurrent senders, several sends each.
        await asyncio.gather(
            *(
                send(
                    first if n % 2 else second,
                    "rules.deduped_digest",
                    recipient_user_id=user.id,
                    payload=item(n),
                )
                for n in range(2, 8)
            )
        )
        jobs = await db.fetch_all(
            "SELECT id, kind, payload, max_attempts FROM jobs"
            " WHERE kind = 'notifications.dispatch' ORDER BY id"
        )
        sent = [job["payload"]["payload"]["n"] for job in jobs]
        assert sent[:2] == [0, 1] and sorted(sent) == list(range(8))
        # The jobs run in reverse (the last send's first), half on each instance, as two
        # runners could; then they are done.
        for index, job in enumerate(reversed(jobs)):
            info = JobInfo(id=job["id"], kind=job["kind"], attempts=1, max_attempts=8)
            await run_dispatch(second if index % 2 else first, job["payload"], info)
        await db.execute("DELETE FROM jobs WHERE kind = 'notifications.dispatch'")
        ran = [
            row["n"]
            for row in await db.fetch_all(
                "SELECT (payload->>'n')::int AS n FROM notification_digest_items"
                " ORDER BY created_at"
            )
        ]
        assert ran == sent[::-1]  # the jobs did run in reverse
        assert await collected(db) == sent
        await db.execute("UPDATE jobs SET run_at = now() WHERE kind = 'notifications.digest'")
        runner = JobRunner(second)
        await runner.start()
        try:
            rows = await eventually(
                lambda: db.fetch_all(
                    "SELECT payload, body FROM notifications WHERE user_id = %(u)s",
                    {"u": user.id},
                )
            )
        finally:
            await runner.stop()
    [row] = rows
    assert [i["n"] for i in row["payload"]["_digest"]["items"]] == sent
    assert row["body"].splitlines() == [f"Item t {n}" for n in sent]
