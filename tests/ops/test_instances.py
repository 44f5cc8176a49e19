"""Two real `tenantd serve` processes on one database behave as one service."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tenantd.app.bundle import open_services
from tenantd.app.plugins import registered_sweeps
from tenantd.app.settings import load_settings
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.migrate import available_migrations
from tenantd.notifications import send
from tests.factories import Factory
from tests.helpers import SECRET, eventually
from tests.ops.servers import (
    ORIGIN,
    REPO,
    fresh_database,
    read_sse,
    running,
    server_env,
    start_server,
)

EVENT_MODULE = "tests.notifications.events_fixture"

pytestmark = pytest.mark.slow


def cookie_header(cookies: dict[str, str]) -> dict[str, str]:
    return {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items()), "Origin": ORIGIN}


def set_cookies(response: aiohttp.ClientResponse) -> dict[str, str]:
    return {name: morsel.value for name, morsel in response.cookies.items()}


async def test_two_servers_behave_as_one(migrated: str, tmp_path: Path) -> None:
    with fresh_database(migrated) as url:
        env = server_env(
            url,
            tmp_path,
            SECRET,
            TENANTD_SCHEDULER_ENABLED="true",
            TENANTD_SCHEDULER_TICK_SECONDS="0.2",
            QUEUES_ENABLED="true",
            NOTIFICATIONS_SSE_ENABLED="true",
            TENANTD_EVENT_MODULES=EVENT_MODULE,
            TENANTD_JOB_POLL_SECONDS="0.05",
            TENANTD_SSE_TICK_SECONDS="0.5",
            PYTHONPATH=str(REPO),
        )
        # Both start on an empty database at once: each migrates first, under the lock.
        a = start_server("a", env, tmp_path)
        b = start_server("b", env, tmp_path)
        async with running([a, b]):
            db = await create_database(url_to_dsn(url), minsize=1, maxsize=2)
            try:
                await check_migrations_ran_once(db)
                settings = load_settings(environ={**env, "TENANTD_DATA_DIR": str(tmp_path)})
                factory = Factory(db, settings)
                async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:
                    await check_sessions_are_shared(http, factory, a.url, b.url)
                    await check_jobs_and_sse_fan_out(http, factory, settings, url, a.url, b.url)
                await check_sweeps_ran_once(db)
            finally:
                await db.close()
        for server in (a, b):
            assert server.process.returncode == 0, server.log()


async def check_migrations_ran_once(db: Any) -> None:
    rows = await db.fetch_all("SELECT version FROM schema_migrations ORDER BY version")
    assert [r["version"] for r in rows] == [m.version for m in available_migrations()]


async def check_sessions_are_shared(
    http: aiohttp.ClientSession, factory: Factory, a: str, b: str
) -> None:
    user = await factory.user()
    # Sign in on A.
    async with http.post(
        a + "/api/v1/auth/login",
        json={"email": user.email, "password": user.password},
        headers={"Origin": ORIGIN},
    ) as response:
        assert response.status == 200, await response.text()
        first = set_cookies(response)
    # The session works on B.
    async with http.get(b + "/api/v1/users/me", headers=cookie_header(first)) as response:
        assert response.status == 200
        assert (await response.json())["user"]["email"] == user.email
    # Refresh on B; the new pair works on A, the rotated refresh token is dead on A.
    async with http.post(b + "/api/v1/auth/refresh", headers=cookie_header(first)) as response:
        assert response.status == 200, await response.text()
        second = set_cookies(response)
    assert second["refresh_token"] != first["refresh_token"]
    async with http.get(a + "/api/v1/users/me", headers=cookie_header(second)) as response:
        assert response.status == 200
    # Logout on A; B refuses the access token and the refresh token. B may answer an access
    # token from memory (its revocation mirror), so it refuses once it has heard A's NOTIFY
    # (within 100 ms: tests/perf/test_cold_tokens.py measures that); A refuses at once.
    async with http.post(a + "/api/v1/auth/logout", headers=cookie_header(second)) as response:
        assert response.status == 200, await response.text()
    async with http.get(a + "/api/v1/users/me", headers=cookie_header(second)) as response:
        assert response.status == 401

    async def refused_on_b() -> dict[str, Any] | None:
        async with http.get(b + "/api/v1/users/me", headers=cookie_header(second)) as response:
            return await response.json() if response.status == 401 else None

    refused = await eventually(refused_on_b)
    assert refused["error"]["details"]["reason"] == "invalid_session"
    refresh_only = {"refresh_token": second["refresh_token"]}
    async with http.post(b + "/api/v1/auth/refresh", headers=cookie_header(refresh_only)) as resp:
        assert resp.status == 401


async def check_sweeps_ran_once(db: Any) -> None:
    expected = set(registered_sweeps())
    rows: list[dict[str, Any]] = []
    for _ in range(300):  # both schedulers tick every 0.2 s; up to 30 s on a busy machine
        rows = await db.fetch_all("SELECT name, run_count, last_status FROM sweep_runs")
        if {r["name"] for r in rows} == expected and all(r["last_status"] == "ok" for r in rows):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(1.0)  # many more ticks of both instances
    rows = await db.fetch_all("SELECT name, run_count, last_status FROM sweep_runs ORDER BY name")
    assert {r["name"] for r in rows} == expected
    assert all(r["run_count"] == 1 and r["last_status"] == "ok" for r in rows), rows


async def check_jobs_and_sse_fan_out(
    http: aiohttp.ClientSession, factory: Factory, settings: Any, url: str, a: str, b: str
) -> None:
    """A user's streams on A and on B both get every notification, each dispatched once by
    whichever instance claimed its job."""
    user = await factory.user()
    cookies = await factory.cookies(user)
    count = 6
    async with (
        http.get(a + "/api/v1/notifications/stream", headers=cookie_header(cookies)) as on_a,
        http.get(b + "/api/v1/notifications/stream", headers=cookie_header(cookies)) as on_b,
    ):
        assert on_a.status == on_b.status == 200
        # Both streams are attached once their first keep-alive arrives.
        await asyncio.gather(on_a.content.readany(), on_b.content.readany())
        async with open_services(settings, url) as services:
            for n in range(count):
                await send(
                    services.notifications,
                    "ping.simple",
                    recipient_user_id=user.id,
                    payload={"n": n},
                )
        frames_a, frames_b = await asyncio.gather(read_sse(on_a, count), read_sse(on_b, count))
    titles = sorted(frame["notification"]["title"] for frame in frames_a)
    assert titles == [f"Ping {n}" for n in range(count)]
    assert sorted(f["notification"]["id"] for f in frames_b) == sorted(
        f["notification"]["id"] for f in frames_a
    )
    jobs: list[dict[str, Any]] = []
    for _ in range(300):  # completions are written in small batches just after the work
        jobs = await factory.db.fetch_all(
            "SELECT status, attempts FROM jobs WHERE kind = 'notifications.dispatch'"
        )
        if all(job["status"] == "done" for job in jobs):
            break
        await asyncio.sleep(0.1)
    assert len(jobs) == count
    assert all(job == {"status": "done", "attempts": 1} for job in jobs), jobs
    assert (
        await factory.db.fetch_val(
            "SELECT count(*) FROM notifications WHERE user_id = %(u)s", {"u": user.id}
        )
        == count
    )
