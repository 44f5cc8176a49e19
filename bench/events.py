"""The event types the benchmarks dispatch (TENANTD_EVENT_MODULES=bench.events): `bench.event`
(in-app + SSE) and the fault bench's `faults.ping` (in-app + email, scripts/faults)."""

from __future__ import annotations

from pydantic import BaseModel

from tenantd.notifications import EmailContent, EventDefinition, InAppContent


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
    ),
    EventDefinition(
        type="faults.ping",
        schema=BenchPayload,
        default_channels=("in_app", "email"),
        in_app=lambda recipient, p: InAppContent(title=f"Fault ping {p.n}"),
        email=lambda recipient, p: EmailContent(
            subject=f"Fault ping {p.n}",
            template_path="templates/fault_ping.txt",
            variables={"n": p.n},
        ),
    ),
]
