"""kill -9 of a real `tenantd serve` in the middle of webhook deliveries to a slow receiver
(issue 26): after a restart everything is delivered, and what the receiver gets twice is at
most what was in flight at the kill (one delivery per object), not the whole batch."""

from __future__ import annotations

import asyncio
import collections
import signal
from pathlib import Path
from typing import Any

from tenantd.app.bundle import open_services
from tenantd.app.settings import load_settings
from tenantd.db import Database
from tenantd.outbox import Actor, Event, emit_many
from tenantd.webhooks import endpoints
from tests.helpers import SECRET, eventually
from tests.ops.servers import REPO, running, server_env, start_server
from tests.webhooks.receiver import start_receiver

ACTOR = Actor.system("test")
OBJECTS = 3
CHANGES = 15  # per object


async def test_kill_9_mid_delivery_repeats_at_most_what_was_in_flight(
    db: Database, migrated: str, tmp_path: Path, aiohttp_server: Any
) -> None:
    receiver = await start_receiver(aiohttp_server, [], delay=0.2)
    env = server_env(
        migrated,
        tmp_path,
        SECRET,
        LOG_LEVEL="warning",
        TENANTD_SCHEDULER_ENABLED="false",
        TENANTD_OUTBOX_POLL_SECONDS="0.02",
        TENANTD_JOB_POLL_SECONDS="0.05",
        JOB_LEASE_SECONDS="2",
        PYTHONPATH=str(REPO),
    )
    async with open_services(load_settings(environ=env), migrated) as services:
        created = await endpoints.add_endpoint(services, url=receiver.url + "/hook")
        receiver.secrets.append(created.secret)
    first = start_server("first", env, tmp_path)
    async with running([first]):
        async with db.transaction() as conn:
            await emit_many(
                conn,
                [
                    Event("user.updated", None, ACTOR, {"id": f"user-{n % OBJECTS}", "n": n})
                    for n in range(OBJECTS * CHANGES)
                ],
            )
        await eventually(lambda: len(receiver.accepted) >= OBJECTS * 5, within=60)
        first.terminate(signal.SIGKILL)
        await asyncio.to_thread(first.wait, 10)
    total = OBJECTS * CHANGES
    second = start_server("second", env, tmp_path)
    async with running([second]):

        async def all_delivered() -> bool:
            done = await db.fetch_val(
                "SELECT count(*) FROM webhook_deliveries WHERE status = 'delivered'"
            )
            return bool(done == total)

        await eventually(all_delivered, within=120)
    counts = collections.Counter(receiver.ids())
    assert len(counts) == total
    doubled = sum(n - 1 for n in counts.values())
    # One object's deliveries go one at a time, each recorded before the next: at the kill,
    # at most one per object was sent and not yet on record.
    assert doubled <= OBJECTS, (doubled, counts)
    by_object: dict[str, list[int]] = collections.defaultdict(list)
    for received in receiver.accepted:
        by_object[received.body["data"]["id"]].append(received.body["data"]["n"])
    for ns in by_object.values():
        firsts = list(dict.fromkeys(ns))  # a repeat is the in-flight one, sent again first
        assert firsts == sorted(firsts), by_object
