"""Deliveries travel in batches: one fan-out job carries up to DELIVERIES_PER_JOB deliveries of
one endpoint, each row naming that job; per-object order holds inside and across batches; a job
that runs again after a crash sends only what its last run did not settle (at-least-once), and
a stale job whose rows moved on sends nothing."""

from __future__ import annotations

import collections
import uuid
from typing import Any

import pytest
from aiohttp import web

from tenantd.jobs.kinds import JobInfo
from tenantd.outbox import Actor, Event, emit_many
from tenantd.webhooks import endpoints
from tenantd.webhooks.delivery import DELIVER, DELIVERIES_PER_JOB, run_deliveries
from tenantd.webhooks.domain import Webhooks, webhooks_of
from tenantd.webhooks.fanout import create_deliveries
from tests.helpers import eventually
from tests.webhooks.receiver import Receiver, start_receiver

ACTOR = Actor.system("test")
PARKED = 3600.0  # jobs due in an hour: the runner leaves them to the test


@pytest.fixture
def services(app: web.Application) -> Webhooks:
    return webhooks_of(app)


async def _endpoint(services: Webhooks, receiver: Receiver) -> uuid.UUID:
    created = await endpoints.add_endpoint(services, url=receiver.url + "/hook")
    receiver.secrets.append(created.secret)
    endpoint_id: uuid.UUID = created.endpoint["id"]
    return endpoint_id


async def _events(services: Webhooks, count: int, objects: int) -> None:
    async with services.db.transaction() as conn:
        await emit_many(
            conn,
            [
                Event("user.updated", None, ACTOR, {"id": f"user-{n % objects}", "n": n})
                for n in range(count)
            ],
        )


async def test_fan_out_writes_one_job_per_batch_and_keeps_order_per_object(
    services: Webhooks, aiohttp_server: Any
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    await _endpoint(services, receiver)
    count = DELIVERIES_PER_JOB * 3 + 5
    await _events(services, count, objects=7)
    await eventually(lambda: len(receiver.accepted) >= count, within=60)
    jobs = await services.db.fetch_all(
        "SELECT payload FROM jobs WHERE kind = %(k)s ORDER BY id", {"k": DELIVER}
    )
    sizes = [len(job["payload"]["deliveries"]) for job in jobs]
    assert sum(sizes) == count and max(sizes) == DELIVERIES_PER_JOB, sizes
    assert len(jobs) < count  # not a job per delivery
    counts = collections.Counter(receiver.ids())
    assert len(counts) == count and max(counts.values()) == 1
    by_object: dict[str, list[int]] = collections.defaultdict(list)
    for received in receiver.accepted:
        by_object[received.body["data"]["id"]].append(received.body["data"]["n"])
    assert all(ns == sorted(ns) for ns in by_object.values()), by_object


async def _parked_batch(
    services: Webhooks, receiver: Receiver, count: int
) -> tuple[JobInfo, dict[str, Any]]:
    """`count` deliveries of fresh events in one job that is due only in an hour. The endpoint
    comes after the relay numbered the events, so the relay's own fan-out does not see it."""
    await _events(services, count, objects=count)
    await eventually(
        lambda: services.db.fetch_val(
            "SELECT count(*) > 0 AND bool_and(seq IS NOT NULL) FROM outbox_events"
        )
    )
    await _endpoint(services, receiver)
    async with services.db.transaction() as conn:
        events = await conn.fetch_all(
            "SELECT id, seq, type, subject FROM outbox_events ORDER BY seq"
        )
        endpoint_rows = await conn.fetch_all("SELECT id, event_types FROM webhook_endpoints")
        await create_deliveries(services, conn, events, endpoint_rows, delay=PARKED)
    job = await services.db.fetch_one(
        "SELECT id, payload FROM jobs WHERE kind = %(k)s AND run_at > now() + interval '1 minute'",
        {"k": DELIVER},
    )
    assert job is not None
    info = JobInfo(id=job["id"], kind=DELIVER, attempts=1, max_attempts=1000)
    return info, job["payload"]


async def test_a_batch_run_again_after_a_crash_sends_only_what_was_not_settled(
    services: Webhooks, aiohttp_server: Any
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    info, payload = await _parked_batch(services, receiver, 6)
    ids = payload["deliveries"]
    assert len(ids) == 6
    # A first run died after its settling transaction had marked three rows delivered, before
    # the job's completion was written: the lease runs out and the same job runs again.
    await services.db.execute(
        "UPDATE webhook_deliveries SET status = 'delivered', delivered_at = now()"
        " WHERE id = ANY(%(ids)s::bigint[])",
        {"ids": ids[:3]},
    )
    assert await run_deliveries(services, [(info, payload)]) == [None]
    sent = {r.body["data"]["n"] for r in receiver.accepted}
    assert len(receiver.accepted) == 3 and sent == {3, 4, 5}
    statuses = await services.db.fetch_all(
        "SELECT status, job_id FROM webhook_deliveries WHERE id = ANY(%(ids)s::bigint[])",
        {"ids": ids},
    )
    assert {r["status"] for r in statuses} == {"delivered"}
    # Run once more (its completion lost again): everything is settled, nothing is sent.
    assert await run_deliveries(services, [(info, payload)]) == [None]
    assert len(receiver.accepted) == 3


async def test_a_stale_batch_job_leaves_rows_that_moved_to_another_job(
    services: Webhooks, aiohttp_server: Any
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    info, payload = await _parked_batch(services, receiver, 4)
    ids = payload["deliveries"]
    # Two rows were handed to retry jobs (their job_id changed): this job may not touch them.
    await services.db.execute(
        "UPDATE webhook_deliveries SET job_id = -1 WHERE id = ANY(%(ids)s::bigint[])",
        {"ids": ids[:2]},
    )
    await run_deliveries(services, [(info, payload)])
    assert len(receiver.accepted) == 2
    rows = await services.db.fetch_all(
        "SELECT id, status FROM webhook_deliveries WHERE id = ANY(%(ids)s::bigint[]) ORDER BY id",
        {"ids": ids},
    )
    assert [r["status"] for r in rows] == ["pending", "pending", "delivered", "delivered"]
