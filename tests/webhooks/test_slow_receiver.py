"""Webhooks against a slow but healthy receiver (issue 26): each delivery is recorded as it
succeeds, no batch outlives its time budget (the rest goes on in a new job), and a delivery
waiting for an earlier one of its object costs no job while it waits."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import uuid
from typing import Any

import pytest
from aiohttp import web

from tenantd.outbox import Actor, Event, emit_many
from tenantd.webhooks import endpoints
from tenantd.webhooks.delivery import DELIVER, DELIVER_KIND
from tenantd.webhooks.domain import Webhooks, webhooks_of
from tests.helpers import eventually
from tests.webhooks.receiver import Receiver, start_receiver

ACTOR = Actor.system("test")


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_WEBHOOK_TIMEOUT_SECONDS"] = "1"
    env["TENANTD_WEBHOOK_SEND_BUDGET_SECONDS"] = "2"
    return env


@pytest.fixture
def services(app: web.Application) -> Webhooks:
    return webhooks_of(app)


async def slow_receiver(aiohttp_server: Any, seconds: float) -> Receiver:
    """A receiver that answers 200, `seconds` after each request arrived."""
    return await start_receiver(aiohttp_server, [], delay=seconds)


async def add_endpoint(services: Webhooks, receiver: Receiver) -> uuid.UUID:
    created = await endpoints.add_endpoint(services, url=receiver.url + "/hook")
    receiver.secrets.append(created.secret)
    endpoint_id: uuid.UUID = created.endpoint["id"]
    return endpoint_id


async def changes(services: Webhooks, count: int, *, start: int = 0) -> None:
    """`count` changes of one object, in one transaction."""
    async with services.db.transaction() as conn:
        await emit_many(
            conn,
            [
                Event("user.updated", None, ACTOR, {"id": "user-1", "n": n})
                for n in range(start, start + count)
            ],
        )


async def delivered(services: Webhooks) -> int:
    count: int = await services.db.fetch_val(
        "SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'"
    )
    return count


def in_order(receiver: Receiver) -> list[int]:
    return [r.body["data"]["n"] for r in receiver.accepted]


async def test_each_delivery_is_recorded_as_its_receiver_answers(
    services: Webhooks, aiohttp_server: Any
) -> None:
    receiver = await slow_receiver(aiohttp_server, 0.25)
    await add_endpoint(services, receiver)
    await changes(services, 8)
    await eventually(lambda: delivered(services), within=60)
    # The first answer is on record while the batch is still sending the others.
    assert len(receiver.accepted) < 8
    await eventually(lambda: len(receiver.accepted) >= 8, within=60)
    await eventually(lambda: _count_is(services, 8), within=30)
    assert in_order(receiver) == list(range(8))


async def _count_is(services: Webhooks, expected: int) -> bool:
    return await delivered(services) == expected


async def test_a_batch_never_outlives_its_budget_against_a_slow_receiver(
    services: Webhooks, aiohttp_server: Any
) -> None:
    # The job's hard stop is 4 s and the send budget 2 s; one object's 12 deliveries take
    # 0.4 s each (4.8 s in a row): one batch cannot hold them all. Before, the batch ran
    # into the timeout, nothing was recorded, and the same deliveries went out again forever.
    services.jobs.register(dataclasses.replace(DELIVER_KIND, timeout=4.0))
    receiver = await slow_receiver(aiohttp_server, 0.4)
    await add_endpoint(services, receiver)
    await changes(services, 12)
    await eventually(lambda: _count_is(services, 12), within=90)
    counts = collections.Counter(receiver.ids())
    assert len(counts) == 12 and max(counts.values()) == 1, counts
    assert in_order(receiver) == list(range(12))
    jobs = await services.db.fetch_all(
        "SELECT status, attempts, last_error FROM jobs WHERE kind = %(k)s", {"k": DELIVER}
    )
    # The batch stopped within its budget (no job ran into its timeout) and handed the rest
    # on: more than one job, every one done at its first attempt.
    assert len(jobs) > 1
    assert all(j["attempts"] == 1 and j["last_error"] is None for j in jobs), jobs


async def test_waiting_for_an_earlier_delivery_creates_no_jobs(
    services: Webhooks, aiohttp_server: Any
) -> None:
    receiver = await slow_receiver(aiohttp_server, 0.2)
    await add_endpoint(services, receiver)
    total = 40
    # One object's changes committed one at a time while earlier ones are being sent: each
    # fan-out's deliveries wait for the earlier ones of that object.
    for n in range(total):
        await changes(services, 1, start=n)
        await asyncio.sleep(0.02)
    await eventually(lambda: _count_is(services, total), within=120)
    assert in_order(receiver) == list(range(total))
    jobs = await services.db.fetch_val(
        "SELECT count(*) FROM jobs WHERE kind = %(k)s", {"k": DELIVER}
    )
    # Bounded by the deliveries (a fan-out job each and at most one hand-over each), not by
    # how long they waited (before: a new job every 0.5 s per waiting delivery).
    assert jobs <= 2 * total, jobs
