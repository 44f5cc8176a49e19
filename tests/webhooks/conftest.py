"""Webhook tests: fast relay, fast retries, short leases."""

from __future__ import annotations

import pytest


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_OUTBOX_POLL_SECONDS"] = "0.02"
    env["TENANTD_WEBHOOK_RETRY_BASE_SECONDS"] = "0.2"
    env["TENANTD_JOB_POLL_SECONDS"] = "0.05"
    env["JOB_LEASE_SECONDS"] = "2"
    env["TENANTD_WEBHOOK_TIMEOUT_SECONDS"] = "3"
    return env
