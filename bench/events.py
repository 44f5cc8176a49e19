"""The event type the benchmark dispatches (in-app + SSE)."""

from __future__ import annotations

EVENTS: list[object] = []
