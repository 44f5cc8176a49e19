"""Benchmarks beyond plain HTTP reads: webhook ingestion, dispatch, SSE latency."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench import webhooks

Benchmark = Callable[[str, str, dict[str, str], Any], dict[str, Any]]


def server_env() -> dict[str, str]:
    return {"SENDGRID_WEBHOOK_PUBLIC_KEY": webhooks.public_key_pem()}


def service_benchmarks() -> list[tuple[str, Benchmark]]:
    return [("sendgrid_ingestion", webhooks.sendgrid_ingestion)]
