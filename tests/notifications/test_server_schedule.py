"""Scheduled sends over HTTP: `deliverAt` (RFC 3339) / `delaySeconds` on send and on each item
of send-batch answer 202 "scheduled" and deliver when due; DELETE
/api/v1/notifications/scheduled/{id} and POST .../scheduled/cancel {id | idempotencyKey} take
one back (scope notifications:send; a key's Idempotency-Key names only its own sends)."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

import pytest

from tenantd.db import Database
from tenantd.notifications.domain import Notifications
from tests.helpers import data, error, eventually
from tests.notifications.test_server_api import BATCH, SEND, key_headers, send_body

QUEUED = pytest.mark.parametrize("queues_enabled", [True])
CANCEL = "/api/v1/notifications/scheduled/cancel"


def scheduled(notification_id: str) -> str:
    return f"/api/v1/notifications/scheduled/{notification_id}"


async def notification(db: Database, notification_id: str) -> Any:
    return await db.fetch_one(
        "SELECT id, title FROM notifications WHERE id = %(id)s", {"id": notification_id}
    )


async def due_in(db: Database, notification_id: str) -> dt.timedelta:
    """How far ahead the dispatch job of a scheduled send was written."""
    value: dt.timedelta = await db.fetch_val(
        "SELECT j.run_at - j.created_at FROM scheduled_notifications s"
        " JOIN jobs j ON j.id = s.job_id WHERE s.notification_id = %(id)s",
        {"id": notification_id},
    )
    return value


@QUEUED
async def test_send_with_delay_seconds_is_scheduled_and_delivered_when_due(
    client: Any, db: Database, factory: Any
) -> None:
    user = await factory.user(password=None)
    headers = await key_headers(db)
    body = {**send_body(user, "ping.simple", n=1), "delaySeconds": 1.0}
    accepted = await data(await client.post(SEND, json=body, headers=headers), 202)
    assert accepted["status"] == "scheduled"
    assert await notification(db, accepted["id"]) is None
    assert await due_in(db, accepted["id"]) >= dt.timedelta(seconds=0.9)
    row = await eventually(lambda: notification(db, accepted["id"]))
    assert row["title"] == "Ping 1"


@QUEUED
async def test_deliver_at_in_rfc3339_with_an_offset(
    client: Any, db: Database, factory: Any
) -> None:
    user = await factory.user(password=None)
    headers = await key_headers(db)
    when = dt.datetime.now(dt.timezone(dt.timedelta(hours=2))) + dt.timedelta(hours=3)
    body = {**send_body(user, "ping.simple", n=2), "deliverAt": when.isoformat()}
    accepted = await data(await client.post(SEND, json=body, headers=headers), 202)
    assert accepted["status"] == "scheduled"
    ahead = await due_in(db, accepted["id"])
    assert dt.timedelta(hours=2, minutes=59) < ahead <= dt.timedelta(hours=3)


@QUEUED
async def test_bad_schedules_are_422_naming_the_field(
    client: Any, db: Database, factory: Any
) -> None:
    user = await factory.user(password=None)
    headers = await key_headers(db)
    base = send_body(user, "ping.simple", n=1)
    naive = (dt.datetime.now() + dt.timedelta(hours=1)).replace(tzinfo=None).isoformat()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"deliverAt": naive}, "deliverAt"),
        ({"deliverAt": "tomorrow"}, "deliverAt"),
        ({"delaySeconds": -5}, "delaySeconds"),
        ({"delaySeconds": 400 * 86_400}, "deliverAt"),
        ({"delaySeconds": 5, "deliverAt": dt.datetime.now(dt.UTC).isoformat()}, "deliverAt"),
    ]
    for extra, field in cases:
        refused = await error(
            await client.post(SEND, json={**base, **extra}, headers=headers),
            422,
            "VALIDATION_ERROR",
        )
        assert field in refused["details"]["fields"], (extra, refused)
    assert await db.fetch_val("SELECT count(*) FROM scheduled_notifications") == 0


async def test_scheduling_needs_the_queue(client: Any, db: Database, factory: Any) -> None:
    user = await factory.user(password=None)
    headers = await key_headers(db)
    body = {**send_body(user, "ping.simple", n=1), "delaySeconds": 60}
    refused = await error(await client.post(SEND, json=body, headers=headers), 422)
    assert "deliverAt" in refused["details"]["fields"]
    batch = {"items": [send_body(user, "ping.simple", n=1), body]}
    refused = await error(await client.post(BATCH, json=batch, headers=headers), 422)
    assert "items.1.deliverAt" in refused["details"]["fields"]
    assert await db.fetch_val("SELECT count(*) FROM notifications") == 0


@QUEUED
async def test_batch_items_may_each_be_scheduled(
    client: Any, db: Database, factory: Any, services: Notifications
) -> None:
    user = await factory.user(password=None)
    headers = await key_headers(db)
    items = [
        send_body(user, "ping.simple", n=0),
        {**send_body(user, "ping.simple", n=1), "delaySeconds": 3600},
        send_body(user, "ping.simple", n=2),
        {**send_body(user, "ping.simple", n=3), "deliverAt": "2099-01-01T00:00:00Z"},
    ]
    # 2099 is more than 366 days ahead: the whole batch is refused, naming the item.
    refused = await error(await client.post(BATCH, json={"items": items}, headers=headers), 422)
    assert list(refused["details"]["fields"]) == ["items.3.deliverAt"]
    items[3]["deliverAt"] = (dt.datetime.now(dt.UTC) + dt.timedelta(days=2)).isoformat()
    accepted = await data(await client.post(BATCH, json={"items": items}, headers=headers), 202)
    statuses = [item["status"] for item in accepted["items"]]
    assert statuses == ["queued", "scheduled", "queued", "scheduled"]
    ids = [item["id"] for item in accepted["items"]]
    assert accepted["ids"] == ids
    assert await due_in(db, ids[1]) >= dt.timedelta(minutes=59)
    assert await due_in(db, ids[3]) >= dt.timedelta(days=1, hours=23)
    await eventually(lambda: notification(db, ids[0]))
    await eventually(lambda: notification(db, ids[2]))
    assert await notification(db, ids[1]) is None
    assert await notification(db, ids[3]) is None


@QUEUED
async def test_cancel_over_http_by_id_and_by_idempotency_key(
    client: Any, db: Database, factory: Any
) -> None:
    user = await factory.user(password=None)
    headers = await key_headers(db)
    later = {**send_body(user, "ping.simple", n=1), "delaySeconds": 3600}
    first = await data(await client.post(SEND, json=later, headers=headers), 202)
    cancelled = await data(await client.delete(scheduled(first["id"]), headers=headers))
    assert cancelled == {"id": first["id"], "status": "cancelled"}
    again = await data(await client.delete(scheduled(first["id"]), headers=headers))
    assert again == cancelled  # idempotent
    job = await db.fetch_val(
        "SELECT j.status FROM scheduled_notifications s JOIN jobs j ON j.id = s.job_id"
        " WHERE s.notification_id = %(id)s",
        {"id": first["id"]},
    )
    assert job != "queued"

    keyed = await data(
        await client.post(SEND, json=later, headers={**headers, "Idempotency-Key": "remind-7"}),
        202,
    )
    # Another key's "remind-7" is not this one.
    other = await key_headers(db)
    await error(
        await client.post(CANCEL, json={"idempotencyKey": "remind-7"}, headers=other),
        404,
        "NOT_FOUND",
    )
    done = await data(
        await client.post(CANCEL, json={"idempotencyKey": "remind-7"}, headers=headers)
    )
    assert done == {"id": keyed["id"], "status": "cancelled"}
    by_body = await data(await client.post(CANCEL, json={"id": keyed["id"]}, headers=headers))
    assert by_body["id"] == keyed["id"]
    actions = await db.fetch_all(
        "SELECT action FROM audit_log WHERE action = 'notifications.cancelled'"
    )
    assert len(actions) == 4


@QUEUED
async def test_cancel_refusals(client: Any, db: Database, factory: Any) -> None:
    user = await factory.user(password=None)
    headers = await key_headers(db)
    await error(await client.delete(scheduled(str(uuid.uuid4())), headers=headers), 404)
    await error(await client.post(CANCEL, json={}, headers=headers), 422)
    await error(
        await client.post(
            CANCEL, json={"id": str(uuid.uuid4()), "idempotencyKey": "x"}, headers=headers
        ),
        422,
    )
    # Without the scope, or without a key at all.
    reader = await key_headers(db, "events:read")
    await error(await client.delete(scheduled(str(uuid.uuid4())), headers=reader), 403)
    await error(await client.delete(scheduled(str(uuid.uuid4()))), 401)
    # A send that started cannot be taken back.
    now = {**send_body(user, "ping.simple", n=1), "delaySeconds": 0}
    started = await data(await client.post(SEND, json=now, headers=headers), 202)
    await eventually(lambda: notification(db, started["id"]))
    await error(await client.delete(scheduled(started["id"]), headers=headers), 409, "CONFLICT")
