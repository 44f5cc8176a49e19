"""Notifications over HTTP with an API key: event types with their payload JSON Schema;
send and send-batch with the rules of the Python `send` (validation, self-action guard, dedup,
preferences, channels), 422 naming fields (and items), all-or-none batches, Idempotency-Key
(first answer repeated for 24 h, concurrent duplicates answered once, swept), the audit row
naming the key, both queue modes."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import uuid
from pathlib import Path
from typing import Any

import pytest

from tenantd.apikeys import service as apikeys
from tenantd.db import Database
from tenantd.notifications.domain import Notifications, notifications_of
from tenantd.ops.sweeps import SweepContext
from tenantd.web.sweeps import idempotency_sweep
from tests.helpers import SECRET, data, error, eventually
from tests.notifications.events_fixture import EVENTS, CommentCreated

BOTH_MODES = pytest.mark.parametrize("queues_enabled", [False, True], ids=["inline", "queued"])
SEND = "/api/v1/notifications/send"
BATCH = "/api/v1/notifications/send-batch"
TYPES = "/api/v1/notifications/event-types"


def comment(actor: Any = None, comment_id: str = "c1", text: str = "Nice work") -> dict[str, Any]:
    return {"actorId": str(actor or uuid.uuid4()), "commentId": comment_id, "text": text}


def send_body(user: Any, event: str = "comment.created", **payload: Any) -> dict[str, Any]:
    return {
        "type": event,
        "recipientUserId": str(user.id),
        "payload": payload or comment(),
    }


async def key_headers(db: Database, *scopes: str) -> dict[str, str]:
    async with db.transaction() as conn:
        created = await apikeys.create_key(
            conn, secret_key=SECRET, name="backend", scopes=scopes or ("notifications:send",)
        )
    return {"Authorization": f"Bearer {created.token}"}


async def quiesce(services: Notifications) -> None:
    async def idle() -> bool:
        await services.jobs.drain(30)
        busy = await services.db.fetch_val(
            "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
        )
        return busy == 0 and services.jobs.pending_inline == 0

    await eventually(idle)


async def count(db: Database, sql: str, **params: Any) -> int:
    value: int = await db.fetch_val(sql, params or None)
    return value


async def test_event_types_list_channels_and_payload_schema(client: Any, db: Database) -> None:
    headers = await key_headers(db)
    listed = await data(await client.get(TYPES, headers=headers))
    by_type = {item["type"]: item for item in listed}
    assert list(by_type) == ["comment.created", "report.ready", "ping.simple"]
    comment_type = by_type["comment.created"]
    assert comment_type["defaultChannels"] == ["in_app", "email", "sse", "web_push"]
    assert comment_type["channels"] == ["in_app", "email", "sse"]  # web push is not configured
    assert comment_type["payloadSchema"] == CommentCreated.model_json_schema()
    assert comment_type["payloadSchema"]["required"] == ["actorId", "commentId", "text"]
    assert by_type["report.ready"]["defaultChannels"] == ["in_app", "email"]


async def test_server_routes_need_the_send_scope(client: Any, db: Database, factory: Any) -> None:
    user = await factory.user()
    other = await key_headers(db, "events:read", "webhooks:manage")
    for method, path, body in (
        ("GET", TYPES, None),
        ("POST", SEND, send_body(user)),
        ("POST", BATCH, {"items": [send_body(user)]}),
    ):
        answer = await client.request(method, path, json=body, headers=other)
        await error(answer, 403, "INSUFFICIENT_SCOPE")
        answer = await client.request(method, path, json=body)
        await error(answer, 401, "UNAUTHORIZED")
    # A signed-in browser is no server caller.
    browser = await factory.cookies(user)
    answer = await client.post(SEND, json=send_body(user), cookies=browser)
    assert answer.status in (401, 403)
    assert await count(db, "SELECT count(*) FROM notifications") == 0


@BOTH_MODES
async def test_send_delivers_like_the_python_send(
    client: Any, db: Database, factory: Any, services: Notifications, queues_enabled: bool
) -> None:
    user = await factory.user()
    headers = await key_headers(db)
    accepted = await data(
        await client.post(SEND, json=send_body(user, **comment(text="Hello")), headers=headers),
        202,
    )
    assert accepted["status"] == ("queued" if queues_enabled else "created")
    await quiesce(services)
    row = await db.fetch_one(
        "SELECT * FROM notifications WHERE id = %(id)s", {"id": accepted["id"]}
    )
    assert row is not None and row["user_id"] == user.id
    assert (row["title"], row["body"]) == ("New comment", "Hello")
    channels = await db.fetch_all(
        "SELECT channel, status FROM notification_deliveries WHERE notification_id = %(id)s",
        {"id": accepted["id"]},
    )
    assert {r["channel"]: r["status"] for r in channels} == {
        "in_app": "sent",
        "email": "sent",
        "sse": "sent",
    }


async def test_guard_dedup_and_preferences_hold(
    client: Any, db: Database, factory: Any, services: Notifications
) -> None:
    user = await factory.user()
    headers = await key_headers(db)
    own = await data(
        await client.post(SEND, json=send_body(user, **comment(actor=user.id)), headers=headers),
        202,
    )
    assert own == {"id": None, "status": "self_action"}
    first = await data(await client.post(SEND, json=send_body(user), headers=headers), 202)
    again = await data(await client.post(SEND, json=send_body(user), headers=headers), 202)
    assert first["status"] == "created"
    assert again == {"id": None, "status": "duplicate"}
    await db.execute(
        "INSERT INTO notification_preferences (user_id, event_type, channel, enabled)"
        " VALUES (%(u)s, 'comment.created', 'email', false)",
        {"u": user.id},
    )
    quiet = await data(
        await client.post(SEND, json=send_body(user, **comment(comment_id="c2")), headers=headers),
        202,
    )
    await quiesce(services)
    status = await db.fetch_one(
        "SELECT status, reason FROM notification_deliveries"
        " WHERE notification_id = %(id)s AND channel = 'email'",
        {"id": quiet["id"]},
    )
    assert status == {"status": "suppressed", "reason": "preference_disabled"}


@BOTH_MODES
async def test_invalid_sends_are_422_naming_the_fields(
    client: Any, db: Database, factory: Any, queues_enabled: bool
) -> None:
    user = await factory.user()
    headers = await key_headers(db)
    cases: list[tuple[dict[str, Any], set[str]]] = [
        (send_body(user, actorId="a", commentId="c"), {"payload.text"}),
        (send_body(user, actorId="a", commentId="c", text=""), {"payload.text"}),
        (send_body(user, actorId=1, commentId="c", text="x"), {"payload.actorId"}),
        ({**send_body(user), "type": "no.such"}, {"type"}),
        ({**send_body(user), "type": "bad type!"}, {"type"}),
        ({**send_body(user), "recipientUserId": str(uuid.uuid4())}, {"recipientUserId"}),
        ({**send_body(user), "recipientUserId": "nope"}, {"recipientUserId"}),
        ({**send_body(user), "payload": "text"}, {"payload"}),
        ({**send_body(user), "extra": 1}, {"extra"}),
        ({**send_body(user), "payload": {**comment(), "text": "nul\x00"}}, {"payload"}),
        ({**send_body(user), "idempotencyKey": "has space"}, {"idempotencyKey"}),
    ]
    for body, fields in cases:
        failure = await error(await client.post(SEND, json=body, headers=headers), 422)
        assert set(failure["details"]["fields"]) == fields, (body, failure)
    # Multi-line text is fine in a payload.
    ok = send_body(user, **comment(text="line one\nline two"))
    assert (await client.post(SEND, json=ok, headers=headers)).status == 202
    assert (
        await count(db, "SELECT count(*) FROM audit_log WHERE action = 'notifications.sent'") == 1
    )


@BOTH_MODES
async def test_batch_is_all_or_none_and_names_the_item(
    client: Any, db: Database, factory: Any, services: Notifications, queues_enabled: bool
) -> None:
    users = [await factory.user() for _ in range(3)]
    headers = await key_headers(db)
    items = [
        send_body(users[0]),
        send_body(users[1], "report.ready", reportName="Q3", rows=4),
        send_body(users[2], "ping.simple", n=1),
    ]
    bad = [*items, send_body(users[0], "report.ready", reportName="Q3", rows="many")]
    failure = await error(await client.post(BATCH, json={"items": bad}, headers=headers), 422)
    assert list(failure["details"]["fields"]) == ["items.3.payload.rows"]
    unknown = [items[0], {**items[1], "recipientUserId": str(uuid.uuid4())}, items[2]]
    failure = await error(await client.post(BATCH, json={"items": unknown}, headers=headers), 422)
    assert failure["details"]["fields"] == {"items.1.recipientUserId": "unknown user"}
    assert await count(db, "SELECT count(*) FROM jobs WHERE kind = 'notifications.dispatch'") == 0

    accepted = await data(await client.post(BATCH, json={"items": items}, headers=headers), 202)
    assert len(accepted["ids"]) == 3 and len(accepted["items"]) == 3
    assert [item["id"] for item in accepted["items"]] == accepted["ids"]
    await quiesce(services)
    rows = await db.fetch_all(
        "SELECT id, user_id, event_type FROM notifications WHERE id = ANY(%(ids)s::uuid[])",
        {"ids": accepted["ids"]},
    )
    assert {(r["user_id"], r["event_type"]) for r in rows} == {
        (users[0].id, "comment.created"),
        (users[1].id, "report.ready"),
        (users[2].id, "ping.simple"),
    }


async def test_batch_size_limits(client: Any, db: Database, factory: Any) -> None:
    user = await factory.user()
    headers = await key_headers(db)
    item = send_body(user, "ping.simple", n=1)
    failure = await error(await client.post(BATCH, json={"items": []}, headers=headers), 422)
    assert "items" in failure["details"]["fields"]
    failure = await error(
        await client.post(BATCH, json={"items": [item] * 1001}, headers=headers), 422
    )
    assert "items" in failure["details"]["fields"]
    accepted = await data(
        await client.post(BATCH, json={"items": [item] * 1000}, headers=headers), 202
    )
    assert len(set(accepted["ids"])) == 1000


@pytest.mark.parametrize("queues_enabled", [True])
async def test_a_queued_batch_is_dispatched_by_the_runner(
    client: Any, db: Database, factory: Any, services: Notifications
) -> None:
    user = await factory.user()
    headers = await key_headers(db)
    items = [send_body(user, "ping.simple", n=i) for i in range(500)]
    accepted = await data(await client.post(BATCH, json={"items": items}, headers=headers), 202)
    assert {item["status"] for item in accepted["items"]} == {"queued"}
    await quiesce(services)
    titles = await db.fetch_all(
        "SELECT id, title FROM notifications WHERE user_id = %(u)s", {"u": user.id}
    )
    by_id = {str(row["id"]): row["title"] for row in titles}
    assert [by_id[i] for i in accepted["ids"]] == [f"Ping {n}" for n in range(500)]


async def test_idempotency_key_repeats_the_first_answer(
    client: Any, db: Database, factory: Any
) -> None:
    user = await factory.user()
    headers = await key_headers(db)
    body = send_body(user, "ping.simple", n=1)
    first = await client.post(SEND, json=body, headers={**headers, "Idempotency-Key": "k-1"})
    first_data = await data(first, 202)
    assert "Idempotent-Replayed" not in first.headers
    again = await client.post(SEND, json=body, headers={**headers, "Idempotency-Key": "k-1"})
    assert await data(again, 202) == first_data
    assert again.headers["Idempotent-Replayed"] == "true"
    # The body field works the same, and agrees with the header.
    in_body = await client.post(SEND, json={**body, "idempotencyKey": "k-1"}, headers=headers)
    assert await data(in_body, 202) == first_data
    mismatch = await client.post(
        SEND, json={**body, "idempotencyKey": "k-2"}, headers={**headers, "Idempotency-Key": "k-1"}
    )
    assert "idempotencyKey" in (await error(mismatch, 422))["details"]["fields"]
    # The same key with another request is a conflict, not a replay.
    other = send_body(user, "ping.simple", n=2)
    reused = await client.post(SEND, json=other, headers={**headers, "Idempotency-Key": "k-1"})
    await error(reused, 409, "IDEMPOTENCY_KEY_REUSED")
    # Keys are per API key and per route.
    second_key = await key_headers(db)
    fresh = await client.post(SEND, json=body, headers={**second_key, "Idempotency-Key": "k-1"})
    assert (await data(fresh, 202))["id"] != first_data["id"]
    batch = await client.post(
        BATCH, json={"items": [body]}, headers={**headers, "Idempotency-Key": "k-1"}
    )
    assert first_data["id"] not in (await data(batch, 202))["ids"]
    assert await count(db, "SELECT count(*) FROM notifications") == 3
    assert (
        await count(db, "SELECT count(*) FROM audit_log WHERE action = 'notifications.sent'") == 3
    )


async def test_a_refused_request_does_not_take_the_key(
    client: Any, db: Database, factory: Any
) -> None:
    user = await factory.user()
    headers = {**await key_headers(db), "Idempotency-Key": "retry-me"}
    bad = send_body(user, "ping.simple", n="x")
    await error(await client.post(SEND, json=bad, headers=headers), 422)
    good = send_body(user, "ping.simple", n=1)
    assert (await data(await client.post(SEND, json=good, headers=headers), 202))["id"]


@BOTH_MODES
async def test_concurrent_duplicates_are_answered_once(
    client: Any, db: Database, factory: Any, services: Notifications, queues_enabled: bool
) -> None:
    user = await factory.user()
    headers = {**await key_headers(db), "Idempotency-Key": "burst"}
    items = [send_body(user, "ping.simple", n=i) for i in range(50)]
    answers = await asyncio.gather(
        *(client.post(BATCH, json={"items": items}, headers=headers) for _ in range(12))
    )
    bodies = [await data(answer, 202) for answer in answers]
    assert all(body == bodies[0] for body in bodies)
    assert sum(a.headers.get("Idempotent-Replayed") == "true" for a in answers) == 11
    await quiesce(services)
    assert await count(db, "SELECT count(*) FROM notifications") == 50


async def test_answers_are_kept_24_hours_then_swept(
    client: Any, db: Database, factory: Any, services: Notifications
) -> None:
    user = await factory.user()
    headers = {**await key_headers(db), "Idempotency-Key": "day"}
    body = send_body(user, "ping.simple", n=1)
    first = await data(await client.post(SEND, json=body, headers=headers), 202)
    await db.execute(
        "UPDATE api_idempotency_keys SET created_at = now() - interval '23 hours 59 minutes'"
    )
    assert await data(await client.post(SEND, json=body, headers=headers), 202) == first
    await db.execute("UPDATE api_idempotency_keys SET created_at = now() - interval '24 hours'")
    later = await data(await client.post(SEND, json=body, headers=headers), 202)
    assert later["id"] != first["id"]  # past 24 h the key is new again
    # The sweep deletes answers older than 24 h, and only those.
    await db.execute(
        "INSERT INTO api_idempotency_keys (api_key_id, route, idempotency_key, request_hash,"
        " response, created_at) SELECT api_key_id, route, 'old', request_hash, response,"
        " %(t)s FROM api_idempotency_keys",
        {"t": dt.datetime.now(dt.UTC) - dt.timedelta(hours=25)},
    )
    ctx = SweepContext(services=services, sweep="idempotency")
    await idempotency_sweep.run(ctx)
    assert ctx.counts == {"api_idempotency_keys": 1}
    keys = await db.fetch_all("SELECT idempotency_key FROM api_idempotency_keys")
    assert [r["idempotency_key"] for r in keys] == ["day"]


async def test_every_send_is_audited_with_the_key_as_actor(
    client: Any, db: Database, factory: Any
) -> None:
    user = await factory.user()
    async with db.transaction() as conn:
        created = await apikeys.create_key(
            conn, secret_key=SECRET, name="billing", scopes=["notifications:send"]
        )
    headers = {"Authorization": f"Bearer {created.token}", "Idempotency-Key": "a1"}
    body = send_body(user, "ping.simple", n=1)
    one = await data(await client.post(SEND, json=body, headers=headers), 202)
    await data(await client.post(SEND, json=body, headers=headers), 202)  # a replay: no change
    items = {"items": [send_body(user, "report.ready", reportName="Q", rows=1), body]}
    await data(
        await client.post(BATCH, json=items, headers={"Authorization": headers["Authorization"]}),
        202,
    )
    rows = await db.fetch_all(
        "SELECT actor_user_id, target, data FROM audit_log"
        " WHERE action = 'notifications.sent' ORDER BY id"
    )
    assert len(rows) == 2
    for row in rows:
        assert row["actor_user_id"] is None
        assert row["data"]["actor"] == {"type": "api_key", "id": str(created.id)}
        assert row["data"]["apiKeyName"] == "billing"
    assert rows[0]["target"] == one["id"]
    assert rows[0]["data"]["count"] == 1 and rows[0]["data"]["idempotencyKey"] == "a1"
    assert rows[1]["data"]["count"] == 2
    assert rows[1]["data"]["types"] == ["ping.simple", "report.ready"]


async def test_the_event_types_answer_is_kept_until_a_type_is_registered(
    client: Any, db: Database
) -> None:
    """The list is serialised once; registering a type (types are never removed) changes
    the next answer at once."""
    headers = await key_headers(db)
    first = await data(await client.get(TYPES, headers=headers))
    again = await data(await client.get(TYPES, headers=headers))
    assert again == first
    services = notifications_of(client.server.app)
    definition = next(e for e in EVENTS if e.type == "ping.simple")
    services.registry.register(
        dataclasses.replace(definition, type="ping.later"), base_dir=Path(__file__).parent
    )
    later = await data(await client.get(TYPES, headers=headers))
    assert [item["type"] for item in later] == [*(item["type"] for item in first), "ping.later"]
