"""Live streams across a database outage (issue 26, item 1): a stream of a real `tenantd serve`
never stays open and silent. It either keeps working (keep-alives while the database is away,
then what was sent after it came back) or ends, and its client reconnects with Last-Event-ID
and gets what it missed. An instance whose stream fan-out died is not ready."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tenantd.app.bundle import open_services
from tenantd.app.settings import load_settings
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.notifications import send
from tenantd.pubsub.hub import PUBSUB
from tests.factories import Factory
from tests.helpers import SECRET, eventually
from tests.notifications.sse_client import STREAM, open_stream
from tests.ops.servers import REPO, running, server_env, start_server
from tests.outage import FaultyCluster, faulty_cluster

__all__ = ["faulty_cluster"]

pytestmark = pytest.mark.slow

EVENT_MODULE = "tests.notifications.events_fixture"
STREAMS = 10
TICK = 0.3  # the streams' idle tick: a keep-alive this often while nothing happens


@dataclass
class Stream:
    """One client's stream, read in the background: when bytes last arrived, the data frames,
    and whether the server ended it."""

    user_id: uuid.UUID
    cookies: dict[str, str]
    frames: list[dict[str, Any]] = field(default_factory=list)
    last_id: str | None = None
    last_bytes: float = 0.0
    ended: bool = False
    task: asyncio.Task[None] | None = None

    async def read(self, response: aiohttp.ClientResponse) -> None:
        buffer = b""
        try:
            while True:
                chunk = await response.content.readany()
                if not chunk:
                    break
                self.last_bytes = time.monotonic()
                buffer += chunk
                while b"\n\n" in buffer:
                    block, buffer = buffer.split(b"\n\n", 1)
                    lines = block.split(b"\n")
                    data = [line[5:].strip() for line in lines if line.startswith(b"data:")]
                    ids = [line[3:].strip() for line in lines if line.startswith(b"id:")]
                    if data:
                        self.frames.append(json.loads(b"\n".join(data)))
                    if ids:
                        self.last_id = ids[-1].decode()
        except (TimeoutError, aiohttp.ClientError):
            pass  # a broken stream is an ended one: the client reconnects
        finally:
            self.ended = True
            response.close()

    def titles(self) -> list[str]:
        return [frame["notification"]["title"] for frame in self.frames]


async def _open(http: aiohttp.ClientSession, base: str, stream: Stream) -> None:
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in stream.cookies.items())}
    if stream.last_id is not None:
        headers["Last-Event-ID"] = stream.last_id
    response = await http.get(base + STREAM, headers=headers)
    assert response.status == 200, await response.text()
    stream.ended = False
    stream.last_bytes = time.monotonic()
    stream.task = asyncio.create_task(stream.read(response))


async def _send_each(settings: Any, url: str, streams: list[Stream], n: int) -> None:
    async with open_services(settings, url) as services_bundle:
        services = services_bundle.notifications
        for stream in streams:
            await send(services, "ping.simple", recipient_user_id=stream.user_id, payload={"n": n})


async def _wait_database(url: str) -> None:
    async def answers() -> bool:
        try:
            db = await create_database(url_to_dsn(url), minsize=1, maxsize=1, bound=2)
        except Exception:
            return False
        try:
            return bool(await db.fetch_val("SELECT 1"))
        except Exception:
            return False
        finally:
            await db.close()

    await eventually(answers, within=30, interval=0.2)


async def _outage_keeps_no_stream_silent(
    cluster: FaultyCluster, tmp_path: Path, fault: str
) -> None:
    env = server_env(
        cluster.url,
        tmp_path,
        SECRET,
        QUEUES_ENABLED="true",
        NOTIFICATIONS_SSE_ENABLED="true",
        TENANTD_SSE_TICK_SECONDS=str(TICK),
        TENANTD_EVENT_MODULES=EVENT_MODULE,
        TENANTD_JOB_POLL_SECONDS="0.05",
        TENANTD_SCHEDULER_ENABLED="false",
        RATE_LIMIT_ENABLED="false",
        PYTHONPATH=str(REPO),
    )
    settings = load_settings(environ=env)
    db = await create_database(url_to_dsn(cluster.url), minsize=1, maxsize=2)
    try:
        factory = Factory(db, settings)
        streams = []
        for _ in range(STREAMS):
            user = await factory.user()
            streams.append(Stream(user.id, await factory.cookies(user)))
    finally:
        await db.close()
    server = start_server("sse", env, tmp_path)
    async with running([server]), aiohttp.ClientSession() as http:
        try:
            for stream in streams:
                await _open(http, server.url, stream)
            await _send_each(settings, cluster.url, streams, 1)
            await eventually(lambda: all(s.titles() == ["Ping 1"] for s in streams))

            if fault == "stop":
                with cluster.stopped():
                    # Long enough for every stream to tick (and re-check) many times.
                    await asyncio.sleep(3)
            else:
                await asyncio.to_thread(cluster.restart)
            await _wait_database(cluster.url)
            back = time.monotonic()

            # No stream is open and silent: each one either keeps sending (its keep-alives
            # come every 0.3 s) or has ended.
            def none_silent() -> bool:
                now = time.monotonic()
                return all(s.ended or s.last_bytes > back for s in streams) and now - back > 2

            await eventually(none_silent, within=20)
            # Ten ticks without a byte: silent.
            silent = [s for s in streams if not s.ended and time.monotonic() - s.last_bytes > 3]
            assert not silent, f"{len(silent)} of {STREAMS} streams open and silent"

            # What is sent now reaches every client: the open streams directly, the ended
            # ones after a reconnect with Last-Event-ID (the replay), as a browser does.
            async def reconnect_ended() -> bool:
                for stream in streams:
                    if stream.ended:
                        with contextlib.suppress(AssertionError, aiohttp.ClientError):
                            await _open(http, server.url, stream)
                return not any(s.ended for s in streams)

            await eventually(reconnect_ended, within=30, interval=0.5)
            await _send_each(settings, cluster.url, streams, 2)

            async def all_delivered() -> bool:
                await reconnect_ended()
                return all(s.titles()[-1:] == ["Ping 2"] for s in streams)

            await eventually(all_delivered, within=30, interval=0.2)
            for stream in streams:
                assert stream.titles().count("Ping 2") == 1, stream.titles()
        finally:
            for stream in streams:
                if stream.task is not None:
                    stream.task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await stream.task
    assert "Traceback" not in server.log(), server.log()[-6000:]


async def test_no_stream_stays_silent_across_a_database_outage(
    faulty_cluster: FaultyCluster, tmp_path: Path
) -> None:
    await _outage_keeps_no_stream_silent(faulty_cluster, tmp_path, "stop")


async def test_no_stream_stays_silent_across_a_database_restart(
    faulty_cluster: FaultyCluster, tmp_path: Path
) -> None:
    await _outage_keeps_no_stream_silent(faulty_cluster, tmp_path, "restart")


async def test_an_instance_whose_stream_fan_out_died_is_not_ready(client: Any, app: Any) -> None:
    response = await client.get("/readyz")
    assert response.status == 200, await response.text()
    hub = app[PUBSUB]
    reader = hub._tasks[0]  # the loop that hears every NOTIFY and fans it out
    reader.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await reader
    assert hub.backend_pid() is not None  # its connection is still open
    response = await client.get("/readyz")
    assert response.status == 503
    assert (await response.json())["checks"]["sseListener"] == "disconnected"


async def test_a_notification_the_feed_could_not_load_is_replayed(
    app: Any, services: Any, db: Any, factory: Any, make_client: Any
) -> None:
    """The feed hears a notification while its pool cannot reach the database: the stream
    gets it by replay (after its last message) once the database answers again."""
    user = await factory.user()
    reader = await open_stream(await make_client(cookies=await factory.cookies(user)))
    await eventually(lambda: f"notifications:user:{user.id}" in app[PUBSUB].channels)
    await send(services, "ping.simple", recipient_user_id=user.id, payload={"n": 1})
    first = await reader.next_event()
    assert first is not None and json.loads(first["data"])["notification"]["title"] == "Ping 1"

    pool = services.db.pool
    pool.down = True  # as the pool's probe sets it: this process cannot reach the database
    try:
        # Sent by another process (its own pool): heard here, not loadable here.
        other = dataclasses.replace(services, kernel=dataclasses.replace(services.kernel, db=db))
        await send(other, "ping.simple", recipient_user_id=user.id, payload={"n": 2})
        await other.jobs.drain(10)
        await reader.keep_alive()  # the stream lives on, holding what it cannot check
    finally:
        pool.down = False
    second = await reader.next_event()
    assert second is not None and json.loads(second["data"])["notification"]["title"] == "Ping 2"
