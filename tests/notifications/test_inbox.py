"""In-app API: list with cursor pagination and status filter, unread count, mark read,
read-all, preferences GET/PUT."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tenantd.notifications import send
from tenantd.notifications.domain import Notifications
from tests.helpers import data, error

BASE = "/api/v1/notifications"
FIELDS = {"id", "eventType", "title", "body", "ctaUrl", "ctaLabel", "status", "readAt", "createdAt"}


async def ping(services: Notifications, user_id: uuid.UUID, n: int) -> uuid.UUID:
    outcome = await send(services, "ping.simple", recipient_user_id=user_id, payload={"n": n})
    assert outcome.notification_id is not None
    return outcome.notification_id


async def test_list_is_newest_first_with_cursor_pagination(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    ids = [await ping(services, user.id, n) for n in range(7)]
    client = await make_client(cookies=await factory.cookies(user))
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        url = f"{BASE}?limit=3" + (f"&cursor={cursor}" if cursor else "")
        page = await data(await client.get(url))
        pages += 1
        for item in page["items"]:
            assert set(item) == FIELDS
        seen.extend(item["id"] for item in page["items"])
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert pages == 3
    assert seen == [str(i) for i in reversed(ids)]
    first = (await data(await client.get(f"{BASE}?limit=1")))["items"][0]
    assert first["eventType"] == "ping.simple"
    assert first["title"] == "Ping 6" and first["body"] == "pong"
    assert first["status"] == "unread" and first["readAt"] is None
    assert first["createdAt"].endswith("Z")


async def test_list_is_private_and_filters_by_status(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    other = await factory.user()
    mine = [await ping(services, user.id, n) for n in range(3)]
    await ping(services, other.id, 99)
    client = await make_client(cookies=await factory.cookies(user))
    read = await data(await client.post(f"{BASE}/{mine[0]}/read"))
    assert read["status"] == "read" and read["readAt"] is not None
    unread = await data(await client.get(f"{BASE}?status=unread"))
    assert [i["id"] for i in unread["items"]] == [str(mine[2]), str(mine[1])]
    read_only = await data(await client.get(f"{BASE}?status=read"))
    assert [i["id"] for i in read_only["items"]] == [str(mine[0])]
    everything = await data(await client.get(BASE))
    assert len(everything["items"]) == 3
    assert await data(await client.get(f"{BASE}/unread-count")) == {"count": 2}
    # Someone else's notification is not found, and stays unread.
    foreign = await services.db.fetch_val(
        "SELECT id FROM notifications WHERE user_id = %(u)s", {"u": other.id}
    )
    refused = await error(await client.post(f"{BASE}/{foreign}/read"), 404)
    assert refused["code"] == "NOT_FOUND"
    assert (
        await services.db.fetch_val(
            "SELECT status FROM notifications WHERE id = %(id)s", {"id": foreign}
        )
        == "unread"
    )
    await error(await client.post(f"{BASE}/not-a-uuid/read"), 404)


async def test_read_is_kept_and_read_all_marks_everything(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    ids = [await ping(services, user.id, n) for n in range(4)]
    client = await make_client(cookies=await factory.cookies(user))
    first = await data(await client.post(f"{BASE}/{ids[0]}/read"))
    again = await data(await client.post(f"{BASE}/{ids[0]}/read"))
    assert again["readAt"] == first["readAt"]
    assert await data(await client.post(f"{BASE}/read-all")) == {"updated": 3}
    assert await data(await client.get(f"{BASE}/unread-count")) == {"count": 0}
    assert (await data(await client.get(f"{BASE}?status=unread")))["items"] == []


async def test_bad_list_parameters(factory: Any, make_client: Any) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    body = await error(await client.get(f"{BASE}?limit=0"), 422)
    assert "limit" in body["details"]["fields"]
    body = await error(await client.get(f"{BASE}?cursor=garbage!"), 422)
    assert "cursor" in body["details"]["fields"]
    body = await error(await client.get(f"{BASE}?status=archived"), 422)
    assert "status" in body["details"]["fields"]


async def test_inbox_requires_a_session(client: Any) -> None:
    for method, path in [
        ("GET", BASE),
        ("GET", f"{BASE}/unread-count"),
        ("POST", f"{BASE}/read-all"),
        ("GET", f"{BASE}/preferences"),
    ]:
        response = await client.request(method, path)
        assert response.status == 401
        assert (await response.json())["error"]["details"]["reason"] == "missing_session"


async def test_preferences_list_every_event_with_effective_settings(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    listing = await data(await client.get(f"{BASE}/preferences"))
    assert listing == [
        {
            "eventType": "comment.created",
            "label": "comment.created",  # a Python type without a label: its name
            "channels": [
                {"channel": "in_app", "enabled": True, "source": "default"},
                {"channel": "email", "enabled": True, "source": "default"},
                {"channel": "sse", "enabled": True, "source": "default"},
            ],
        },
        {
            "eventType": "report.ready",
            "label": "report.ready",  # a Python type without a label: its name
            "channels": [
                {"channel": "in_app", "enabled": True, "source": "default"},
                {"channel": "email", "enabled": True, "source": "default"},
            ],
        },
        {
            "eventType": "ping.simple",
            "label": "ping.simple",  # a Python type without a label: its name
            "channels": [
                {"channel": "in_app", "enabled": True, "source": "default"},
                {"channel": "sse", "enabled": True, "source": "default"},
            ],
        },
    ]
    changed = await data(
        await client.put(
            f"{BASE}/preferences",
            json={"eventType": "comment.created", "channel": "email", "enabled": False},
        )
    )
    assert changed == {"eventType": "comment.created", "channel": "email", "enabled": False}
    listing = await data(await client.get(f"{BASE}/preferences"))
    assert listing[0]["channels"][1] == {"channel": "email", "enabled": False, "source": "user"}
    # The setting is used by dispatch.
    outcome = await send(
        services,
        "comment.created",
        recipient_user_id=user.id,
        payload={"actorId": str(uuid.uuid4()), "commentId": "p", "text": "t"},
    )
    status = await services.db.fetch_val(
        "SELECT status FROM notification_deliveries"
        " WHERE notification_id = %(id)s AND channel = 'email'",
        {"id": outcome.notification_id},
    )
    assert status == "suppressed"
    # Turning it back on.
    await data(
        await client.put(
            f"{BASE}/preferences",
            json={"eventType": "comment.created", "channel": "email", "enabled": True},
        )
    )
    listing = await data(await client.get(f"{BASE}/preferences"))
    assert listing[0]["channels"][1] == {"channel": "email", "enabled": True, "source": "user"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"eventType": "nope", "channel": "email", "enabled": False}, "eventType"),
        ({"eventType": "ping.simple", "channel": "email", "enabled": False}, "channel"),
        ({"eventType": "ping.simple", "channel": "web_push", "enabled": False}, "channel"),
        ({"eventType": "ping.simple", "channel": "pigeon", "enabled": False}, "channel"),
        ({"eventType": "ping.simple", "channel": "sse"}, "enabled"),
    ],
)
async def test_preference_validation(
    factory: Any, make_client: Any, body: dict[str, Any], field: str
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    response = await client.put(f"{BASE}/preferences", json=body)
    payload = await error(response, 422)
    assert field in payload["details"]["fields"]


async def test_sql_rendered_inbox_items_match_the_python_rendering(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    """The inbox page is rendered by PostgreSQL, SSE and mark-read by notification_json: the
    same notification must come out the same (timestamps compared as instants)."""
    import datetime as dt

    import orjson

    from tenantd.notifications.queries import NOTIFICATION_COLUMNS
    from tenantd.notifications.schemas import notification_json

    user = await factory.user()
    notification_id = await ping(services, user.id, 3)
    browser = await make_client(cookies=await factory.cookies(user))
    page = await data(await browser.get("/api/v1/notifications"))
    (item,) = page["items"]
    row = await services.db.fetch_one(
        f"SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE id = %(i)s", {"i": notification_id}
    )
    assert row is not None
    expected = orjson.loads(orjson.dumps(notification_json(row), option=orjson.OPT_UTC_Z))

    def instant(value: str | None) -> dt.datetime | None:
        return None if value is None else dt.datetime.fromisoformat(value.replace("Z", "+00:00"))

    assert set(item) == set(expected)
    for key in expected:
        if key in ("createdAt", "readAt"):
            assert instant(item[key]) == instant(expected[key]), key
        else:
            assert item[key] == expected[key], key
