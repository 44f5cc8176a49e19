"""Identity test fixtures: a cheap argon2id cost (these tests sign in over HTTP a lot)."""

from __future__ import annotations

import pytest
from argon2 import PasswordHasher

from tenantd.identity import passwords


@pytest.fixture(autouse=True)
def cheap_argon2(monkeypatch: pytest.MonkeyPatch) -> None:
    cheap = PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    monkeypatch.setattr(passwords, "hasher", lambda: cheap)
