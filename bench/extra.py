"""Benchmarks that need the notification, SSE and webhook code (filled in as those land)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Benchmark = Callable[[str, str, dict[str, str], Any], dict[str, Any]]


def server_env() -> dict[str, str]:
    return {}


def service_benchmarks() -> list[tuple[str, Benchmark]]:
    return []
