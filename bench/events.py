"""The event type the benchmark dispatches: in-app + SSE (TENANTD_EVENT_MODULES=bench.events)."""

from __future__ import annotations

from pydantic import BaseModel

from tenantd.notifications import EventDefinition, InAppContent


class BenchPayload(BaseModel):
    n: int


EVENTS = [
    EventDefinition(
        type="bench.event",
        schema=BenchPayload,
        default_channels=("in_app", "sse"),
        in_app=lambda recipient, p: InAppContent(
            title=f"Benchmark {p.n}", body="Something happened", cta_url="/", cta_label="Open"
        ),
    )
]
