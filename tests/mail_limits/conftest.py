"""Mail-limit tests: the limiter on, with small limits so a few requests cross them, and a
cheap argon2id (sign-ups hash passwords)."""

from __future__ import annotations

import pytest

from tests.identity.probes import cheap_argon2

__all__ = ["cheap_argon2"]

SMALL = {
    "RATE_LIMIT_EMAIL_CHANGE_PER_USER": "3",
    "RATE_LIMIT_EMAIL_CHANGE_PER_RECIPIENT": "2",
    "RATE_LIMIT_INVITATION_PER_USER": "3",
    "RATE_LIMIT_INVITATION_PER_RECIPIENT": "2",
    "RATE_LIMIT_REGISTER_PER_EMAIL": "2",
    "RATE_LIMIT_RESEND_VERIFICATION_PER_EMAIL": "2",
    "RATE_LIMIT_PASSWORD_RESET_PER_EMAIL": "2",
}


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["RATE_LIMIT_ENABLED"] = "true"
    env.update(SMALL)
    return env
