"""Publish after commit (issue 31 part 1): commits per second with 32 concurrent writers that
each announce something, today's way against the new way, side by side in one run.

- `notify`: the way tenantd announced before: `pg_notify` inside the writing transaction.
  PostgreSQL takes a database-wide lock at the commit of every transaction that notified,
  so the writers' commits (each waiting for its WAL flush) queue behind one another.
- `relay`: the way it announces now: the transaction writes a row of `announcements`
  (`tenantd_announce`) and this process's relay (tenantd/db/relay.py) publishes the rows
  after commit, many per NOTIFY transaction.

Each writer's transaction is the same small write (one UPDATE of its own row) plus its
announcement. Commits are durable: a private cluster of its own with fsync,
synchronous_commit and full_page_writes on (the test and bench clusters turn them off).
The modes alternate in rounds; each is given as commits/s (the best round) and a LISTEN
connection checks that every announcement arrives, with its delay after the commit.

    PYTHONPATH=$PWD .venv/bin/python -m bench.announce [--seconds 4] [--rounds 2]

`scripts/bench` runs it as the `announce_commits` figure (`figure()` below): `rate` is the
relay's commits/s, `notify_rate` today's; both get a ratio to hello-world.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiopg

from tenantd.db.core import Database, create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.embedded import EmbeddedCluster
from tenantd.db.migrate import migrate
from tenantd.db.relay import publishing

WRITERS = 32
CHANNEL = "bench_announce"
DURABLE = "-c fsync=on -c synchronous_commit=on -c full_page_writes=on"
SETUP = (
    "CREATE TABLE IF NOT EXISTS bench_announce_rows (id int PRIMARY KEY, n bigint NOT NULL);"
    f" INSERT INTO bench_announce_rows SELECT g, 0 FROM generate_series(1, {WRITERS}) g"
    " ON CONFLICT DO NOTHING"
)
WRITE = "UPDATE bench_announce_rows SET n = n + 1 WHERE id = %(id)s"
ANNOUNCE = {
    "notify": "SELECT pg_notify(%(c)s, %(p)s)",
    "relay": "SELECT tenantd_announce(%(c)s, %(p)s)",
}


class Heard:
    """A LISTEN connection: how many announcements arrived and how long after their commit."""

    def __init__(self, conn: aiopg.Connection):
        self.conn = conn
        self.arrived: dict[str, float] = {}
        self.expected = 0  # set when the writers stop: `all_in` is set once that many arrived
        self.all_in = asyncio.Event()

    async def loop(self) -> None:
        while True:
            message = await self.conn.notifies.get()
            self.arrived[message.payload] = time.perf_counter()
            if self.expected and len(self.arrived) >= self.expected:
                self.all_in.set()


async def round_of(db: Database, heard: Heard, mode: str, seconds: float) -> dict[str, Any]:
    sql = ANNOUNCE[mode]
    commits = 0
    stop = time.perf_counter() + seconds
    heard.arrived, heard.expected = {}, 0
    heard.all_in.clear()
    committed: dict[str, float] = {}
    wake = mode == "relay"  # the relay is woken after its own commits, as in tenantd

    async def writer(w: int) -> None:
        nonlocal commits
        n = 0
        while time.perf_counter() < stop:
            n += 1
            payload = f"{mode}:{w}:{n}"
            async with db.transaction() as conn:
                await conn.execute(WRITE, {"id": w})
                await conn.execute(sql, {"c": CHANNEL, "p": payload})
                if wake:
                    conn.announced()
            committed[payload] = time.perf_counter()
            commits += 1

    began = time.perf_counter()
    await asyncio.gather(*(writer(w) for w in range(1, WRITERS + 1)))
    wall = time.perf_counter() - began
    heard.expected = commits
    if len(heard.arrived) >= commits:
        heard.all_in.set()
    async with asyncio.timeout(60):  # every announcement arrives (the relay catches up)
        await heard.all_in.wait()
    # After the writer saw its commit (a NOTIFY may arrive before the writer resumes: 0).
    delays = [max(0.0, heard.arrived[p] - at) * 1000 for p, at in committed.items()]
    cuts = statistics.quantiles(delays, n=100)
    return {
        "rate": round(commits / wall, 1),
        "commits": commits,
        "heard": len(heard.arrived),
        "delay_p50_ms": round(cuts[49], 2),
        "delay_p99_ms": round(cuts[98], 2),
    }


async def measure(dsn: str, seconds: float, rounds: int) -> dict[str, Any]:
    db = await create_database(dsn, minsize=WRITERS, maxsize=WRITERS + 2)
    listen = await aiopg.connect(dsn, enable_hstore=False)
    heard = Heard(listen)
    try:
        await db.execute(SETUP)
        await db.execute("DELETE FROM announcements")
        async with listen.cursor() as cur:
            await cur.execute(f"LISTEN {CHANNEL}")
        hearing = asyncio.create_task(heard.loop())
        results: dict[str, list[dict[str, Any]]] = {"notify": [], "relay": []}
        try:
            async with publishing(db):
                await round_of(db, heard, "relay", 1.0)  # warm: every connection open
                for _ in range(rounds):
                    for mode in ("notify", "relay"):
                        results[mode].append(await round_of(db, heard, mode, seconds))
        finally:
            hearing.cancel()
        best = {mode: max(runs, key=lambda r: r["rate"]) for mode, runs in results.items()}
        synchronous = await db.fetch_val("SHOW synchronous_commit")
        fsync = await db.fetch_val("SHOW fsync")
    finally:
        listen.close()
        await db.close()
    return {
        "rate": best["relay"]["rate"],
        "notify_rate": best["notify"]["rate"],
        "speedup": round(best["relay"]["rate"] / best["notify"]["rate"], 2),
        "writers": WRITERS,
        "relay": best["relay"],
        "notify": best["notify"],
        "durable": f"fsync={fsync} synchronous_commit={synchronous}",
    }


async def on_own_cluster(seconds: float, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tenantd-announce-") as root:
        cluster = EmbeddedCluster(Path(root) / "pg", options=DURABLE)
        cluster.start()
        try:
            dsn = url_to_dsn(cluster.url)
            setup = await create_database(dsn, minsize=1, maxsize=1)
            try:
                await migrate(setup)
            finally:
                await setup.close()
            return await measure(dsn, seconds, rounds)
        finally:
            cluster.stop()


def figure(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    """scripts/bench's `announce_commits`: on a durable cluster of its own (the bench's has
    fsync off), so the server and its database are left alone."""
    return asyncio.run(on_own_cluster(seconds=4.0, rounds=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(on_own_cluster(args.seconds, args.rounds)), indent=2))
