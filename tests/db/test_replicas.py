"""Read replicas (issue 31, part 3): reads that tolerate lag go to a streaming replica built
with pg_basebackup; a caller reads its own writes (its replica read waits for the replica to
replay them, then the primary answers); a paused, lagging or stopped replica never fails a
read, and reads go back to it once it answers again.

The kernel's Database.read here; the routes that read through it are in
tests/notifications/test_replica_reads.py (each module builds its own pair)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from tenantd.db import Conn, Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.marks import WriteMarks
from tests.helpers import eventually
from tests.replica import ReplicaPair, replica_pair

__all__ = ["replica_pair"]

pytestmark = pytest.mark.slow

WAIT = 0.3  # seconds a read waits for the replica to replay its caller's writes


@pytest.fixture
async def routed(replica_pair: ReplicaPair) -> AsyncIterator[Database]:
    """The primary's pool with the replica attached, as DATABASE_REPLICA_URLS attaches it."""
    db = await create_database(url_to_dsn(replica_pair.url), minsize=1, maxsize=3)
    replica = await create_database(url_to_dsn(replica_pair.replica_url), minsize=0, maxsize=3)
    db.use_replicas([replica], wait=WAIT)
    await db.execute(
        "CREATE TABLE IF NOT EXISTS replica_probe (id uuid PRIMARY KEY, owner uuid NOT NULL)"
    )
    await eventually(replica_pair.caught_up)
    try:
        yield db
    finally:
        await db.close()


async def where_and_what(conn: Conn, owner: uuid.UUID) -> tuple[bool, int]:
    """(whether this connection is a replica's, how many rows `owner` has there)."""
    in_recovery = await conn.fetch_val("SELECT pg_is_in_recovery()")
    count = await conn.fetch_val(
        "SELECT count(*) FROM replica_probe WHERE owner = %(o)s", {"o": owner}
    )
    return bool(in_recovery), int(count)


async def write(db: Database, owner: uuid.UUID) -> None:
    await db.execute(
        "INSERT INTO replica_probe (id, owner) VALUES (%(i)s, %(o)s)",
        {"i": uuid.uuid4(), "o": owner},
    )


async def test_reads_go_to_the_replica(routed: Database, replica_pair: ReplicaPair) -> None:
    owner = uuid.uuid4()
    await write(routed, owner)
    await eventually(replica_pair.caught_up)
    assert await routed.read(lambda conn: where_and_what(conn, owner)) == (True, 1)
    # writes and plain connections stay on the primary
    async with routed.connection() as conn:
        assert await conn.fetch_val("SELECT pg_is_in_recovery()") is False


async def test_a_caller_reads_its_own_writes_while_replay_is_paused(
    routed: Database, replica_pair: ReplicaPair
) -> None:
    owner, other = uuid.uuid4(), uuid.uuid4()
    with replica_pair.replay_paused():
        await eventually(
            lambda: (
                replica_pair.query(replica_pair.replica, "SELECT pg_get_wal_replay_pause_state()")
                == "paused"
            )
        )
        await write(routed, owner)
        routed.marks.note(owner)  # what a request that wrote does after its commit
        # the caller: the replica has not replayed its write; after WAIT the primary answers
        assert await routed.read(lambda conn: where_and_what(conn, owner), caller=owner) == (
            False,
            1,
        )
        # anyone else reads the replica as it is: lag is what these reads tolerate
        assert await routed.read(lambda conn: where_and_what(conn, owner), caller=other) == (
            True,
            0,
        )
        # a position given outright works the same way
        position = await routed.fetch_val("SELECT pg_current_wal_insert_lsn()::text")
        assert await routed.read(
            lambda conn: where_and_what(conn, owner), consistent_after=position
        ) == (False, 1)
    # replay resumed: the caller's read waits for it and stays on the replica
    assert await routed.read(lambda conn: where_and_what(conn, owner), caller=owner) == (True, 1)


async def test_a_stopped_replica_never_fails_a_read_and_is_used_again_when_back(
    routed: Database, replica_pair: ReplicaPair
) -> None:
    owner = uuid.uuid4()
    await write(routed, owner)
    await eventually(replica_pair.caught_up)
    assert (await routed.read(lambda conn: where_and_what(conn, owner)))[0] is True  # pooled
    replica = routed.replicas[0]
    with replica_pair.replica_stopped():
        for _ in range(3):  # the pooled connection ends, then new ones are refused
            assert await routed.read(lambda conn: where_and_what(conn, owner)) == (False, 1)
        await eventually(lambda: replica.pool.down)  # its probe found it gone: skipped
        assert await routed.read(lambda conn: where_and_what(conn, owner)) == (False, 1)
    # back: the probe sees it answer and reads go to it again
    await eventually(lambda: not replica.pool.down)
    await eventually(replica_pair.caught_up)
    assert await routed.read(lambda conn: where_and_what(conn, owner)) == (True, 1)


async def test_several_replicas_take_turns_and_a_down_one_is_skipped(
    routed: Database, replica_pair: ReplicaPair
) -> None:
    second = await create_database(url_to_dsn(replica_pair.replica_url), minsize=0, maxsize=2)
    first = routed.replicas[0]
    routed.use_replicas([first, second], wait=WAIT)
    try:
        for _ in range(4):
            await routed.read(lambda conn: conn.fetch_val("SELECT 1"))
        used = [first.pool.size, second.pool.size]
        assert all(size >= 1 for size in used)  # both opened a connection: both took turns
        second.pool.down = True  # as its probe leaves it while the server does not answer
        for _ in range(3):
            assert (await routed.read(lambda conn: where_and_what(conn, uuid.uuid4())))[0]
        second.pool.down = False
    finally:
        routed.use_replicas([first], wait=WAIT)
        await second.close()


def test_marks_expire_and_a_resolve_never_overwrites_a_newer_write() -> None:
    now = [0.0]
    marks = WriteMarks(seconds=10, size=2, clock=lambda: now[0])
    marks.note("a")
    mark = marks.get("a")
    assert mark is not None and mark[0] is None
    marks.note("a")  # a newer write before the first position came back
    marks.resolve("a", mark[1], "0/1")
    newer = marks.get("a")
    assert newer is not None and newer[0] is None
    marks.resolve("a", newer[1], "0/2")
    assert marks.get("a") == ("0/2", newer[1])
    marks.note("b")
    marks.note("c")  # past the size: the oldest goes
    assert marks.get("a") is None and len(marks) == 2
    now[0] = 11.0
    assert marks.get("b") is None


async def test_a_lagging_replica_hands_the_read_to_one_that_has_replayed(
    routed: Database, replica_pair: ReplicaPair
) -> None:
    """The first replica in turn lags past the bound: the next healthy one is asked (here a
    pool on the primary's server stands in for a replica that is caught up)."""
    caught_up = await create_database(url_to_dsn(replica_pair.url), minsize=0, maxsize=1)
    lagging = routed.replicas[0]
    routed.use_replicas([lagging, caught_up], wait=WAIT)
    owner = uuid.uuid4()
    try:
        with replica_pair.replay_paused():
            await eventually(
                lambda: (
                    replica_pair.query(
                        replica_pair.replica, "SELECT pg_get_wal_replay_pause_state()"
                    )
                    == "paused"
                )
            )
            await write(routed, owner)
            routed.marks.note(owner)
            before = dict(routed.replica_reads)
            routed._turn = 0  # the lagging one first
            assert await routed.read(lambda conn: where_and_what(conn, owner), caller=owner) == (
                False,
                1,
            )
            assert routed.replica_reads["replica"] == before.get("replica", 0) + 1
            assert routed.replica_reads["lagging"] == before.get("lagging", 0)
    finally:
        routed.use_replicas([lagging], wait=WAIT)
        await caught_up.close()
