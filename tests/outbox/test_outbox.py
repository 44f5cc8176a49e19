"""The outbox: an event is written with its change or not at all, and readers page through
events in commit order even when transactions commit out of insertion order."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

import pytest

from tenantd.db import Database
from tenantd.ops.sweeps import SweepContext
from tenantd.outbox import Actor, Event, emit, emit_many, pump, read
from tenantd.outbox import sequence as number
from tenantd.outbox.sweeps import events_sweep


async def _types(db: Database, after: int = 0) -> list[str]:
    async with db.connection() as conn:
        return [row["type"] for row in await read(conn, after=after, types=None, limit=100)]


async def test_a_committed_change_emits_and_a_rolled_back_one_emits_nothing(db: Database) -> None:
    actor = Actor.user(uuid.uuid4())
    with pytest.raises(RuntimeError):
        async with db.transaction() as conn:
            await emit(conn, "account.updated", account_id=None, actor=actor, data={"id": "a"})
            raise RuntimeError("the change fails after the event was written")
    async with db.transaction() as conn:
        event_id = await emit(
            conn,
            "account.created",
            account_id=uuid.uuid4(),
            actor=actor,
            data={"id": "b", "name": "Acme"},
        )
    assert event_id.startswith("evt_")
    await pump(db)
    assert await _types(db) == ["account.created"]
    assert await db.fetch_val("SELECT count(*) FROM outbox_events") == 1


async def test_the_cursor_follows_commit_order_not_insertion_order(db: Database) -> None:
    """T1 inserts first and commits last: a reader that already passed T2's event must still
    get T1's, so T1's event is numbered after T2's."""
    actor = Actor.system("test")
    t1_inserted = asyncio.Event()
    t2_committed = asyncio.Event()

    async def t1() -> None:
        async with db.transaction() as conn:
            await emit(conn, "user.updated", account_id=None, actor=actor, data={"id": "first"})
            t1_inserted.set()
            await t2_committed.wait()
            # While T1 is open, the sequencer numbers T2 only.
            assert await pump(other) == 1

    async def t2() -> None:
        await t1_inserted.wait()
        async with db.transaction() as conn:
            await emit(conn, "user.updated", account_id=None, actor=actor, data={"id": "second"})
        t2_committed.set()

    other = db
    await asyncio.gather(t1(), t2())
    async with db.connection() as conn:
        first_page = await read(conn, after=0, types=None, limit=10)
    assert [r["data"]["id"] for r in first_page] == ["second"]
    cursor = first_page[-1]["seq"]
    await pump(db)
    async with db.connection() as conn:
        rows = await read(conn, after=cursor, types=None, limit=10)
    assert [r["data"]["id"] for r in rows] == ["first"]
    ids = await db.fetch_all("SELECT id, data->>'id' AS name FROM outbox_events ORDER BY id")
    assert [r["name"] for r in ids] == ["first", "second"]  # inserted in the other order


async def test_concurrent_writers_and_sequencers_lose_and_double_nothing(db: Database) -> None:
    actor = Actor.system("test")
    count = 200

    async def writer(n: int) -> None:
        async with db.transaction() as conn:
            await emit(conn, "user.updated", account_id=None, actor=actor, data={"id": str(n)})
            await asyncio.sleep(0.001 * (n % 5))

    seen: list[dict[str, Any]] = []
    stop = asyncio.Event()

    async def reader() -> None:
        cursor = 0
        while True:
            done = stop.is_set()
            await pump(db)
            async with db.connection() as conn:
                rows = await read(conn, after=cursor, types=None, limit=1000)
            if rows:
                cursor = rows[-1]["seq"]
                seen.extend(rows)
            elif done:
                return
            await asyncio.sleep(0.001)

    read_task = asyncio.ensure_future(reader())
    await asyncio.gather(*(writer(n) for n in range(count)))
    stop.set()
    await read_task
    names = [row["data"]["id"] for row in seen]
    assert sorted(names, key=int) == [str(n) for n in range(count)]
    seqs = [row["seq"] for row in seen]
    assert seqs == list(range(1, count + 1))


async def test_one_sequencer_at_a_time(db: Database) -> None:
    async with db.transaction() as conn:
        await emit(conn, "user.updated", account_id=None, actor=Actor.system("t"), data={"id": 1})
    await pump(db)
    async with db.transaction() as conn:
        await emit(conn, "user.updated", account_id=None, actor=Actor.system("t"), data={"id": 2})
    async with db.transaction() as first:
        assert await number(first) is not None
        async with db.transaction() as second:
            assert await number(second) is None  # skipped, not blocked


async def test_emit_many_and_type_filter(db: Database) -> None:
    actor = Actor.operator("ops")
    async with db.transaction() as conn:
        await emit_many(
            conn,
            [
                Event("invitation.expired", uuid.uuid4(), actor, {"id": "i1"}),
                Event("account.purged", uuid.uuid4(), actor, {"id": "a1"}),
            ],
        )
    await pump(db)
    async with db.connection() as conn:
        rows = await read(conn, after=0, types=["account.purged"], limit=10)
    assert [r["type"] for r in rows] == ["account.purged"]
    assert rows[0]["actor_type"] == "operator" and rows[0]["actor_id"] == "ops"


async def test_the_retention_sweep_deletes_old_events_only(db: Database, settings: Any) -> None:
    actor = Actor.system("test")
    async with db.transaction() as conn:
        for name in ("old", "new"):
            await emit(conn, "user.updated", account_id=None, actor=actor, data={"id": name})
    await pump(db)
    await db.execute(
        "UPDATE outbox_events SET occurred_at = now() - interval '31 days'"
        " WHERE data->>'id' = 'old'"
    )
    services = SimpleNamespace(db=db, settings=settings)
    context = SweepContext(services=services, sweep="events")  # type: ignore[arg-type]
    await events_sweep.run(context)
    assert context.counts == {"outbox_events": 1}
    assert [r["data"]["id"] for r in await _rows(db)] == ["new"]


async def _rows(db: Database) -> list[dict[str, Any]]:
    async with db.connection() as conn:
        return await read(conn, after=0, types=None, limit=10)
