"""Notification tests: the fixture event module, both queue modes, fast ticks."""

from __future__ import annotations

import pytest
from aiohttp import web

from tenantd.notifications.domain import Notifications, notifications_of
from tests.notifications.support import EVENT_MODULE


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
def services(app: web.Application) -> Notifications:
    """The running app's notifications domain (tests here call its functions)."""
    return notifications_of(app)
