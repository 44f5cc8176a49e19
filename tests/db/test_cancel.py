"""A cancelled caller stays cancelled: aiopg waits on each step of a connect with
asyncio.wait_for, which on Python 3.11 returns the step's result and drops a cancel that
lands as the step finishes. The pool honours such a cancel, and a relay's block ends even
when a cancel is dropped on its way (a CI run once hung 600 s in a fixture's teardown)."""

from __future__ import annotations

import asyncio
from typing import Any

import aiopg
import pytest

from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.relay import Relay, publishing

WITHIN = 30.0  # seconds: however busy the machine


async def test_a_caller_cancelled_as_its_connect_finishes_is_cancelled(
    migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_connect = aiopg.connect
    connecting = asyncio.Event()

    async def opened(*args: Any, **kwargs: Any) -> aiopg.Connection:
        return await real_connect(*args, **kwargs)

    async def connect_dropping_cancels(*args: Any, **kwargs: Any) -> aiopg.Connection:
        """What wait_for does when the cancel and the step's end meet: finish, no cancel."""
        step = asyncio.ensure_future(opened(*args, **kwargs))
        connecting.set()
        try:
            return await asyncio.shield(step)
        except asyncio.CancelledError:
            return await step

    database = await create_database(url_to_dsn(migrated), minsize=0, maxsize=2)
    try:
        monkeypatch.setattr(aiopg, "connect", connect_dropping_cancels)
        caller = asyncio.ensure_future(database.fetch_val("SELECT 1"))
        await asyncio.wait_for(connecting.wait(), WITHIN)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(caller, WITHIN)
        monkeypatch.undo()
        assert await database.fetch_val("SELECT 2") == 2  # the pool serves on
    finally:
        await asyncio.wait_for(database.close(), WITHIN)  # no connection left checked out


class DroppingRelay(Relay):
    """A relay whose task swallows its first cancel, as a dropped one looks."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.running = asyncio.Event()
        self.dropped = 0

    async def run(self) -> None:
        self.running.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                if self.dropped:
                    raise
                self.dropped += 1


async def test_a_relay_that_drops_a_cancel_still_stops(
    migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    database = await create_database(url_to_dsn(migrated), minsize=1, maxsize=2)
    monkeypatch.setattr("tenantd.db.relay.Relay", DroppingRelay)
    try:
        async with asyncio.timeout(WITHIN) as limit:
            async with publishing(database) as relay:
                assert isinstance(relay, DroppingRelay)
                await relay.running.wait()
        assert not limit.expired()  # the block ended by itself, the relay cancelled again
        assert relay.dropped == 1
    finally:
        await database.close()
