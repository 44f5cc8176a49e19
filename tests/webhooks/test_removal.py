"""Removing an endpoint while one of its delivery jobs settles: the job locks its deliveries,
then the endpoint row; removal takes them in the same order, so neither side is ended as a
deadlock victim (the cascade alone went endpoint first and deadlocked under load)."""

from __future__ import annotations

import asyncio

from aiohttp import web

from tenantd.outbox import Actor, emit
from tenantd.webhooks import endpoints
from tenantd.webhooks.domain import Webhooks, webhooks_of
from tests.helpers import eventually


async def test_removal_waits_for_a_settling_job_instead_of_deadlocking(
    app: web.Application,
) -> None:
    services: Webhooks = webhooks_of(app)
    endpoint_id = (await endpoints.add_endpoint(services, url="http://127.0.0.1:9/hook")).endpoint[
        "id"
    ]
    async with services.db.transaction() as conn:
        await emit(conn, "user.updated", account_id=None, actor=Actor.system("t"), data={"id": "u"})
    event_row = await services.db.fetch_val("SELECT max(id) FROM outbox_events")
    delivery = await services.db.fetch_val(
        "INSERT INTO webhook_deliveries (endpoint_id, event_row, seq, subject)"
        " VALUES (%(e)s, %(r)s, 1, 'u') RETURNING id",
        {"e": endpoint_id, "r": event_row},
    )

    async with services.db.transaction() as settling:
        # A delivery job settling: its deliveries first ...
        await settling.execute(
            "UPDATE webhook_deliveries SET attempts = attempts + 1 WHERE id = %(d)s",
            {"d": delivery},
        )
        removal = asyncio.ensure_future(endpoints.remove_endpoint(services, endpoint_id))

        async def removal_waits() -> bool:
            waiting = await services.db.fetch_val(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                " AND query LIKE 'DELETE FROM webhook_%%'"
            )
            return bool(waiting)

        await eventually(removal_waits)
        # ... then the endpoint row: with the removal holding it, this is the deadlock.
        await settling.execute(
            "UPDATE webhook_endpoints SET failing_since = NULL WHERE id = %(e)s",
            {"e": endpoint_id},
        )
    await removal
    assert await services.db.fetch_val("SELECT count(*) FROM webhook_endpoints") == 0
    assert await services.db.fetch_val("SELECT count(*) FROM webhook_deliveries") == 0
