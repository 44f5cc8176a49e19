"""Mail-limit tests: the limiter on, with small limits so a few requests cross them."""

from __future__ import annotations

import pytest

SMALL = {
    "RATE_LIMIT_EMAIL_CHANGE_PER_USER": "3",
    "RATE_LIMIT_EMAIL_CHANGE_PER_RECIPIENT": "2",
    "RATE_LIMIT_INVITATION_PER_USER": "3",
    "RATE_LIMIT_INVITATION_PER_RECIPIENT": "2",
}


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["RATE_LIMIT_ENABLED"] = "true"
    env.update(SMALL)
    return env
