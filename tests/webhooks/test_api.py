"""The server routes with a real API key: the events API (events:read) in commit order with
its cursor and type filter, and endpoint management (webhooks:manage)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.apikeys import service as apikeys
from tenantd.bundle import DOMAINS
from tenantd.outbox import Actor, emit
from tests.helpers import SECRET, data, eventually


async def key(app: web.Application, *scopes: str) -> dict[str, str]:
    async with app[DOMAINS].db.connection() as conn:
        created = await apikeys.create_key(
            conn, secret_key=SECRET, name="backend", scopes=list(scopes)
        )
    return {"Authorization": f"Bearer {created.token}"}


async def test_events_api_pages_in_commit_order(app: web.Application, client: Any) -> None:
    db = app[DOMAINS].db
    for n in range(5):
        async with db.transaction() as conn:
            await emit(
                conn, "user.updated", account_id=None, actor=Actor.system("t"), data={"id": str(n)}
            )
    async with db.transaction() as conn:
        await emit(
            conn, "account.updated", account_id=None, actor=Actor.system("t"), data={"id": "a"}
        )
    headers = await key(app, "events:read")
    assert (await client.get("/api/v1/events")).status == 401
    no_scope = await key(app, "webhooks:manage")
    assert (await client.get("/api/v1/events", headers=no_scope)).status == 403

    async def all_numbered() -> bool:
        return bool(await db.fetch_val("SELECT count(*) = 0 FROM outbox_events WHERE seq IS NULL"))

    await eventually(all_numbered)
    page = await data(await client.get("/api/v1/events?limit=3", headers=headers))
    assert [e["data"]["id"] for e in page["items"]] == ["0", "1", "2"] and page["hasMore"]
    rest = await data(
        await client.get(f"/api/v1/events?after={page['nextCursor']}", headers=headers)
    )
    assert [e["data"]["id"] for e in rest["items"]] == ["3", "4", "a"]
    assert rest["hasMore"] is False
    same = await data(
        await client.get(f"/api/v1/events?after={rest['nextCursor']}", headers=headers)
    )
    assert same == {"items": [], "nextCursor": rest["nextCursor"], "hasMore": False}
    typed = await data(await client.get("/api/v1/events?types=account.updated", headers=headers))
    assert [e["type"] for e in typed["items"]] == ["account.updated"]
    bad = await client.get("/api/v1/events?after=abc", headers=headers)
    assert bad.status == 422


async def test_endpoint_management_over_http(app: web.Application, client: Any) -> None:
    headers = await key(app, "webhooks:manage")
    assert (await client.get("/api/v1/webhook-endpoints")).status == 401
    reader = await key(app, "events:read")
    assert (await client.get("/api/v1/webhook-endpoints", headers=reader)).status == 403
    created = await data(
        await client.post(
            "/api/v1/webhook-endpoints",
            json={"url": "http://127.0.0.1:9/hook", "events": ["user.*"], "description": "x"},
            headers=headers,
        ),
        201,
    )
    endpoint_id = created["endpoint"]["id"]
    assert created["secret"].startswith("whsec_")
    listed = await data(await client.get("/api/v1/webhook-endpoints", headers=headers))
    assert [e["id"] for e in listed] == [endpoint_id]
    rotated = await data(
        await client.post(f"/api/v1/webhook-endpoints/{endpoint_id}/rotate-secret", headers=headers)
    )
    assert rotated["secret"] != created["secret"]
    refused = await client.post(
        "/api/v1/webhook-endpoints", json={"url": "http://169.254.169.254/"}, headers=headers
    )
    assert refused.status == 422
    tested = await data(
        await client.post(f"/api/v1/webhook-endpoints/{endpoint_id}/test", headers=headers)
    )
    assert tested["eventId"].startswith("evt_")
    actor = await app[DOMAINS].db.fetch_one(
        "SELECT actor_type, actor_id FROM outbox_events WHERE event_id = %(e)s",
        {"e": tested["eventId"]},
    )
    assert actor is not None and actor["actor_type"] == "api_key" and actor["actor_id"]
    rows = await data(
        await client.get(f"/api/v1/webhook-endpoints/{endpoint_id}/deliveries", headers=headers)
    )
    assert rows[0]["eventId"] == tested["eventId"]
    await data(await client.delete(f"/api/v1/webhook-endpoints/{endpoint_id}", headers=headers))
    gone = await client.delete(f"/api/v1/webhook-endpoints/{endpoint_id}", headers=headers)
    assert gone.status == 404
