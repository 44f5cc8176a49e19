"""What the email tests share besides fixtures: the app starter's type and a recorder of
backoff sleeps."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp.test_utils import TestClient

Start = Callable[..., Awaitable[TestClient[Any, Any]]]


class Sleeps:
    """Records backoff delays instead of sleeping, so retry tests run fast."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
