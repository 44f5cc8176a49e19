"""Throttle (over the limit: every delivery row `suppressed`, reason `throttled`), critical
events (preferences do not apply), and scheduled / delayed sends through the durable queue:
due later, survive a restart, cancel by id or idempotency key before they are due."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from typing import Any

import pytest

from tenantd.app.bundle import open_services
from tenantd.errors import Conflict, NotFound, ValidationFailed
from tenantd.jobs.runner import JobRunner
from tenantd.notifications import (
    Digest,
    EventDefinition,
    InAppContent,
    RegistryError,
    Throttle,
    cancel_scheduled,
    send,
)
from tenantd.notifications.domain import Notifications
from tenantd.notifications.registry import EventRegistry
from tests.helpers import eventually
from tests.notifications.beyond_events_fixture import Alert
from tests.notifications.support import EVENT_MODULE, deliveries, quiesce

BOTH_MODES = pytest.mark.parametrize("queues_enabled", [False, True], ids=["inline", "queued"])


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_EVENT_MODULES"] = f"{EVENT_MODULE},tests.notifications.beyond_events_fixture"
    return env


@BOTH_MODES
async def test_sends_over_the_throttle_limit_are_suppressed_as_throttled(
    services: Notifications, factory: Any, queues_enabled: bool
) -> None:
    user = await factory.user(password=None)
    other = await factory.user(password=None)
    ids = []
    for n in range(5):
        outcome = await send(
            services, "alert.throttled", recipient_user_id=user.id, payload={"topic": "db", "n": n}
        )
        ids.append(outcome.notification_id)
    # Another key (topic, recipient) has its own budget.
    elsewhere = await send(
        services, "alert.throttled", recipient_user_id=user.id, payload={"topic": "cpu"}
    )
    mine = await send(
        services, "alert.throttled", recipient_user_id=other.id, payload={"topic": "db"}
    )
    await quiesce(services)
    states = [await deliveries(services, i) for i in ids]
    sent = {"in_app": ("sent", None), "sse": ("sent", None)}
    throttled = {"in_app": ("suppressed", "throttled"), "sse": ("suppressed", "throttled")}
    if queues_enabled:
        # Queued dispatch jobs of separate batches run side by side: which sends are over
        # the limit is not fixed, how many is (it failed 1 run in 4 before issue 19 too).
        assert sorted(map(str, states)) == sorted(map(str, [sent] * 3 + [throttled] * 2))
    else:
        assert states == [sent] * 3 + [throttled] * 2
    assert (await deliveries(services, elsewhere.notification_id))["in_app"] == ("sent", None)
    assert (await deliveries(services, mine.notification_id))["in_app"] == ("sent", None)
    # The inbox shows only the three that went through.
    shown = await services.db.fetch_val(
        "SELECT count(*) FROM notifications WHERE user_id = %(u)s AND in_app"
        " AND event_type = 'alert.throttled' AND title LIKE 'Alert db%%'",
        {"u": user.id},
    )
    assert shown == 3


async def test_concurrent_sends_count_exactly_once_each(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    outcomes = await asyncio.gather(
        *(
            send(services, "alert.throttled", recipient_user_id=user.id, payload={"topic": "x"})
            for _ in range(10)
        )
    )
    await quiesce(services)
    statuses = [(await deliveries(services, o.notification_id))["in_app"][0] for o in outcomes]
    assert statuses.count("sent") == 3
    assert statuses.count("suppressed") == 7


async def test_a_new_window_starts_when_the_old_one_ran_out(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    for _ in range(4):
        await send(services, "alert.throttled", recipient_user_id=user.id, payload={"topic": "w"})
    await services.db.execute(
        "UPDATE notification_throttles SET window_start = now() - interval '2 hours'"
    )
    fresh = await send(
        services, "alert.throttled", recipient_user_id=user.id, payload={"topic": "w"}
    )
    await quiesce(services)
    assert (await deliveries(services, fresh.notification_id))["in_app"] == ("sent", None)


async def test_critical_events_ignore_a_disabled_preference(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    await services.db.execute(
        "INSERT INTO notification_preferences (user_id, event_type, channel, enabled)"
        " VALUES (%(u)s, 'alert.critical', 'in_app', false)",
        {"u": user.id},
    )
    outcome = await send(
        services, "alert.critical", recipient_user_id=user.id, payload={"topic": "fire"}
    )
    await quiesce(services)
    assert await deliveries(services, outcome.notification_id) == {"in_app": ("sent", None)}


def test_registry_checks_throttle_and_digest() -> None:
    registry = EventRegistry()
    base = {"schema": Alert, "in_app": lambda r, p: InAppContent(title="x")}
    with pytest.raises(RegistryError, match="throttle"):
        registry.register(
            EventDefinition(
                type="a.b",
                throttle=Throttle(key=lambda r, p: r, limit=0, window_seconds=60),
                **base,  # type: ignore[arg-type]
            ),
            base_dir=".",
        )
    with pytest.raises(RegistryError, match="digest"):
        registry.register(
            EventDefinition(
                type="a.c",
                digest=Digest(key=lambda r, p: r, window_seconds=0),
                **base,  # type: ignore[arg-type]
            ),
            base_dir=".",
        )


# -- scheduled and delayed sends ------------------------------------------------------------


async def notification_row(services: Notifications, notification_id: Any) -> Any:
    return await services.db.fetch_one(
        "SELECT id, title FROM notifications WHERE id = %(id)s", {"id": notification_id}
    )


@pytest.mark.parametrize("queues_enabled", [True])
async def test_a_delayed_send_is_delivered_when_due(services: Notifications, factory: Any) -> None:
    user = await factory.user(password=None)
    outcome = await send(
        services,
        "ping.simple",
        recipient_user_id=user.id,
        payload={"n": 1},
        delay_seconds=1.0,
    )
    assert outcome.status == "scheduled"
    assert await notification_row(services, outcome.notification_id) is None
    run_at = await services.db.fetch_val(
        "SELECT run_at - created_at FROM jobs WHERE kind = 'notifications.dispatch'"
    )
    assert run_at >= dt.timedelta(seconds=0.9)
    await eventually(lambda: notification_row(services, outcome.notification_id))


@pytest.mark.parametrize("queues_enabled", [True])
async def test_cancel_by_id_and_by_idempotency_key_before_due(
    services: Notifications, factory: Any
) -> None:
    user = await factory.user(password=None)
    later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    by_id = await send(
        services, "ping.simple", recipient_user_id=user.id, payload={}, deliver_at=later
    )
    keyed = await send(
        services,
        "ping.simple",
        recipient_user_id=user.id,
        payload={},
        deliver_at=later,
        idempotency_key="reminder-42",
    )
    again = await send(
        services,
        "ping.simple",
        recipient_user_id=user.id,
        payload={},
        deliver_at=later,
        idempotency_key="reminder-42",
    )
    assert again.notification_id == keyed.notification_id
    assert await services.db.fetch_val("SELECT count(*) FROM jobs") == 2

    assert await cancel_scheduled(services, notification_id=by_id.notification_id) == (
        by_id.notification_id
    )
    assert await cancel_scheduled(services, idempotency_key="reminder-42") == (
        keyed.notification_id
    )
    assert await cancel_scheduled(services, idempotency_key="reminder-42")  # idempotent
    states = await services.db.fetch_all("SELECT status, last_error FROM jobs")
    assert states == [{"status": "failed", "last_error": "cancelled"}] * 2
    with pytest.raises(NotFound):
        await cancel_scheduled(services, notification_id=uuid.uuid4())


@pytest.mark.parametrize("queues_enabled", [True])
async def test_a_started_send_cannot_be_cancelled(services: Notifications, factory: Any) -> None:
    user = await factory.user(password=None)
    outcome = await send(
        services, "ping.simple", recipient_user_id=user.id, payload={}, delay_seconds=0
    )
    await eventually(lambda: notification_row(services, outcome.notification_id))
    with pytest.raises(Conflict):
        await cancel_scheduled(services, notification_id=outcome.notification_id)


@pytest.mark.parametrize("queues_enabled", [True])
async def test_a_scheduled_send_survives_a_restart(
    settings: Any, migrated: str, db: Any, factory: Any
) -> None:
    user = await factory.user(password=None)
    queued = settings.switched("QUEUES_ENABLED", True)
    async with open_services(queued, migrated) as first_bundle:  # no runner: this instance "dies"
        first = first_bundle.notifications
        outcome = await send(
            first, "ping.simple", recipient_user_id=user.id, payload={"n": 7}, delay_seconds=1
        )
    async with open_services(queued, migrated) as second_bundle:
        second = second_bundle.notifications
        runner = JobRunner(second)
        await runner.start()
        try:
            row = await eventually(lambda: notification_row(second, outcome.notification_id))
            assert row["title"] == "Ping 7"
        finally:
            await runner.stop()


@pytest.mark.parametrize("queues_enabled", [False])
async def test_scheduling_needs_the_queue(services: Notifications, factory: Any) -> None:
    user = await factory.user(password=None)
    with pytest.raises(ValidationFailed):
        await send(services, "ping.simple", recipient_user_id=user.id, payload={}, delay_seconds=5)


@pytest.mark.parametrize("queues_enabled", [True])
@pytest.mark.parametrize(
    "when",
    [
        {"delay_seconds": -1},
        {"delay_seconds": float("nan")},
        {"deliver_at": dt.datetime(2030, 1, 1)},  # naive
        {"deliver_at": dt.datetime.now(dt.UTC) + dt.timedelta(days=400)},
        {"delay_seconds": 1, "deliver_at": dt.datetime.now(dt.UTC)},
    ],
)
async def test_bad_schedules_are_refused(
    services: Notifications, factory: Any, when: dict[str, Any]
) -> None:
    user = await factory.user(password=None)
    with pytest.raises(ValidationFailed):
        await send(services, "ping.simple", recipient_user_id=user.id, payload={}, **when)
