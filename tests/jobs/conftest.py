"""Job tests run with QUEUES_ENABLED on, short leases and fast retries."""

from __future__ import annotations

import pytest

from tests.notifications.support import EVENT_MODULE


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_EVENT_MODULES"] = EVENT_MODULE
    env["QUEUES_ENABLED"] = "true"
    env["JOB_LEASE_SECONDS"] = "1"
    env["TENANTD_JOB_POLL_SECONDS"] = "0.05"
    env["TENANTD_JOB_RETRY_BASE_SECONDS"] = "0.05"
    env["TENANTD_JOB_STOP_TIMEOUT_SECONDS"] = "0.3"
    env["TENANTD_SCHEDULER_ENABLED"] = "false"
    return env
