"""The pub/sub hub LISTENs for thousands of subscribers that arrive together in a few round
trips (10,000 SSE streams attaching at once), and every one of them is live once its
subscribe returns; unsubscribing likewise UNLISTENs in batches."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tenantd.db import Database
from tenantd.db.dsn import url_to_dsn
from tenantd.pubsub import PubSubHub
from tests.helpers import eventually

CHANNELS = 400


async def test_concurrent_subscribes_share_round_trips_and_are_live_on_return(
    db: Database, migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub = PubSubHub(url_to_dsn(migrated))
    await hub.start()
    syncs = 0
    apply_channels = hub._apply_channels

    async def counted() -> None:
        nonlocal syncs
        syncs += 1
        await apply_channels()

    monkeypatch.setattr(hub, "_apply_channels", counted)
    heard: dict[str, list[str]] = {}

    async def subscribe_then_publish(n: int) -> Any:
        channel = f"batch-test:{n}"
        subscription = await hub.subscribe(
            channel, lambda c, payload: heard.setdefault(c, []).append(payload)
        )
        # Live on return: a NOTIFY committed now reaches it.
        await db.execute("SELECT pg_notify(%(c)s, 'x')", {"c": channel})
        return subscription

    try:
        subscriptions = await asyncio.gather(*(subscribe_then_publish(n) for n in range(CHANNELS)))
        assert syncs <= 3, f"{syncs} round trips for {CHANNELS} subscribes"
        assert hub.channels == {f"batch-test:{n}" for n in range(CHANNELS)}

        async def all_heard() -> bool:
            return len(heard) == CHANNELS and all(v == ["x"] for v in heard.values())

        await eventually(all_heard)

        syncs = 0
        await asyncio.gather(*(hub.unsubscribe(s) for s in subscriptions[: CHANNELS // 2]))
        assert syncs <= 3
        assert len(hub.channels) == CHANNELS // 2
        # What was unsubscribed hears nothing more; the rest still does.
        heard.clear()
        for n in (0, CHANNELS - 1):
            await db.execute("SELECT pg_notify(%(c)s, 'y')", {"c": f"batch-test:{n}"})

        async def last_heard() -> bool:
            return heard.get(f"batch-test:{CHANNELS - 1}") == ["y"]

        await eventually(last_heard)
        assert "batch-test:0" not in heard
    finally:
        await hub.close()


async def test_reconnect_listens_to_every_channel_again(db: Database, migrated: str) -> None:
    hub = PubSubHub(url_to_dsn(migrated))
    await hub.start()
    heard: list[str] = []
    try:
        for n in range(50):
            await hub.subscribe(f"again:{n}", lambda c, _p: heard.append(c))
        pid = hub.backend_pid()
        await db.execute("SELECT pg_terminate_backend(%(p)s)", {"p": pid})

        async def reconnected() -> bool:
            return hub.reconnects >= 1 and hub.is_connected()

        await eventually(reconnected, within=30)
        await db.execute("SELECT pg_notify('again:49', 'z')")

        async def heard_again() -> bool:
            return "again:49" in heard

        await eventually(heard_again)
    finally:
        await hub.close()
