"""Notification tests: the fixture event module, both queue modes, fast ticks."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web

from tenantd.app import AppServices
from tenantd.services import SERVICES

EVENT_MODULE = "tests.notifications.events_fixture"


@pytest.fixture
def queues_enabled() -> bool:
    """Parametrize this name to run a test with QUEUES_ENABLED on."""
    return False


@pytest.fixture
def sse_enabled() -> bool:
    return True


@pytest.fixture
def env(env: dict[str, str], queues_enabled: bool, sse_enabled: bool) -> dict[str, str]:
    env["TENANTD_EVENT_MODULES"] = EVENT_MODULE
    env["QUEUES_ENABLED"] = "true" if queues_enabled else "false"
    env["NOTIFICATIONS_SSE_ENABLED"] = "true" if sse_enabled else "false"
    env["TENANTD_JOB_RETRY_BASE_SECONDS"] = "0.01"
    env["TENANTD_JOB_POLL_SECONDS"] = "0.05"
    env["TENANTD_SSE_TICK_SECONDS"] = "0.3"
    env["TENANTD_SCHEDULER_ENABLED"] = "false"
    return env


@pytest.fixture
def services(app: web.Application) -> AppServices:
    return app[SERVICES]


async def eventually(
    check: Callable[[], Awaitable[Any]], *, within: float = 30.0, interval: float = 0.02
) -> Any:
    """Poll `check` until it returns something truthy (the bound is generous: a busy machine
    is slow, and a check that holds returns at once anyway)."""
    deadline = time.monotonic() + within
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


async def quiesce(services: AppServices, *, within: float = 30.0) -> None:
    """Wait until no job (durable or inline) is left to run."""

    async def idle() -> bool:
        await services.jobs.drain(within)
        busy = await services.db.fetch_val(
            "SELECT count(*) FROM jobs WHERE status IN ('queued', 'running')"
        )
        return busy == 0 and services.jobs.pending_inline == 0

    await eventually(idle, within=within)


async def deliveries(services: AppServices, notification_id: Any) -> dict[str, tuple[str, Any]]:
    rows = await services.db.fetch_all(
        "SELECT channel, status, reason FROM notification_deliveries"
        " WHERE notification_id = %(id)s",
        {"id": notification_id},
    )
    return {row["channel"]: (row["status"], row["reason"]) for row in rows}
