"""A database outage seen by a real `tenantd serve`: requests are answered 503
SERVICE_UNAVAILABLE with Retry-After, at once while the pool knows the database is down, with
one warning and no traceback in the log; the instance recovers by itself when the database
answers again. A paused database (SIGSTOP) holds no caller for the pool's 30 s bound."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.helpers import SECRET
from tests.ops.servers import REPO, running, server_env, start_server
from tests.outage import FaultyCluster, faulty_cluster

__all__ = ["faulty_cluster"]

pytestmark = pytest.mark.slow

LOGIN = "/api/v1/auth/login"
WRONG = {"email": "nobody@example.com", "password": "not the password 1"}
FAST = 2.0  # seconds: "at once" on a shared machine


def _env(cluster: FaultyCluster, tmp_path: Path, **extra: str) -> dict[str, str]:
    return server_env(
        cluster.url,
        tmp_path,
        SECRET,
        QUEUES_ENABLED="true",
        NOTIFICATIONS_SSE_ENABLED="true",
        RATE_LIMIT_ENABLED="false",
        LOG_LEVEL="info",
        PYTHONPATH=str(REPO),
        **extra,
    )


async def _login(http: aiohttp.ClientSession, base: str) -> tuple[int, Any, float, str | None]:
    """A request that needs the database: status, body, seconds taken, Retry-After."""
    started = time.monotonic()
    async with http.post(base + LOGIN, json=WRONG) as response:
        body = await response.json()
        return (
            response.status,
            body,
            time.monotonic() - started,
            response.headers.get("Retry-After"),
        )


async def _until_answered(http: aiohttp.ClientSession, base: str, within: float) -> float:
    """Seconds until the database-backed request is answered as usual (401) again."""
    started = time.monotonic()
    while True:
        status, body, _, _ = await _login(http, base)
        if status == 401:
            return time.monotonic() - started
        assert status == 503, body
        assert time.monotonic() - started < within, "tenantd did not recover by itself"
        await asyncio.sleep(0.1)


async def _until_ready(http: aiohttp.ClientSession, base: str, within: float) -> None:
    """Wait for /readyz to answer 200: its checks (the LISTEN connection among them) come
    back on their own reconnects, after the pool has answered again."""
    deadline = time.monotonic() + within
    while True:
        async with http.get(base + "/readyz") as response:
            if response.status == 200:
                return
            assert response.status == 503, await response.text()
        assert time.monotonic() < deadline, "/readyz did not become ready by itself"
        await asyncio.sleep(0.1)


def _assert_quiet(log: str) -> None:
    assert "Traceback" not in log, log[-6000:]
    assert " 500 " not in log, log[-6000:]


async def test_a_stopped_database_is_answered_503_fast_and_recovers_alone(
    faulty_cluster: FaultyCluster, tmp_path: Path
) -> None:
    server = start_server("outage", _env(faulty_cluster, tmp_path), tmp_path)
    async with running([server]), aiohttp.ClientSession() as http:
        status, _, _, _ = await _login(http, server.url)
        assert status == 401
        with faulty_cluster.stopped():
            # Down for two seconds: every request in that time answered at once.
            until = time.monotonic() + 2
            while time.monotonic() < until:
                status, body, took, retry_after = await _login(http, server.url)
                assert status == 503, body
                assert body["error"]["code"] == "SERVICE_UNAVAILABLE"
                assert retry_after is not None and int(retry_after) > 0
                assert took < FAST, took
            async with http.get(server.url + "/readyz") as response:
                assert response.status == 503
        await _until_answered(http, server.url, within=60)
        await _until_ready(http, server.url, within=60)
    log = server.log()
    _assert_quiet(log)
    # One line says the database is away, one that it is back; nothing in between.
    assert log.count("tenantd.db.core: database unavailable") == 1, log[-6000:]
    assert log.count("tenantd.db.core: database available again") == 1, log[-6000:]


async def test_a_restarted_database_is_answered_503_then_used_again(
    faulty_cluster: FaultyCluster, tmp_path: Path
) -> None:
    server = start_server("restart", _env(faulty_cluster, tmp_path), tmp_path)
    async with running([server]), aiohttp.ClientSession() as http:
        # Warm several pooled connections, which the restart then breaks.
        results = await asyncio.gather(*(_login(http, server.url) for _ in range(8)))
        assert {result[0] for result in results} == {401}
        await asyncio.to_thread(faulty_cluster.restart)
        results = await asyncio.gather(*(_login(http, server.url) for _ in range(8)))
        assert {result[0] for result in results} <= {401, 503}, results
        await _until_answered(http, server.url, within=20)
    _assert_quiet(server.log())


async def test_a_paused_database_is_answered_503_within_a_bound(
    faulty_cluster: FaultyCluster, tmp_path: Path
) -> None:
    server = start_server("paused", _env(faulty_cluster, tmp_path), tmp_path)
    async with running([server]), aiohttp.ClientSession() as http:
        status, _, _, _ = await _login(http, server.url)
        assert status == 401
        with faulty_cluster.paused():
            # Callers already waiting when the database stalls: answered within the stall
            # bound (a few seconds), not the pool's 30 s.
            first = await asyncio.gather(*(_login(http, server.url) for _ in range(5)))
            for status, body, took, retry_after in first:
                assert status == 503, body
                assert body["error"]["code"] == "SERVICE_UNAVAILABLE"
                assert retry_after is not None
                assert took < 12, took
            # Once the pool knows, at once.
            for _ in range(5):
                status, body, took, _ = await _login(http, server.url)
                assert status == 503, body
                assert took < FAST, took
        await _until_answered(http, server.url, within=20)
    _assert_quiet(server.log())
