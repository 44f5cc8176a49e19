"""Event types of the digest-rule tests: digested events that also deduplicate or throttle."""

from __future__ import annotations

from pydantic import BaseModel

from tenantd.notifications import Dedup, Digest, EventDefinition, InAppContent, Throttle


class Item(BaseModel):
    topic: str
    n: int = 0


EVENTS = [
    EventDefinition(
        type="rules.deduped_digest",
        schema=Item,
        default_channels=("in_app",),
        digest=Digest(key=lambda recipient, p: p.topic, window_seconds=3600, max_items=50),
        dedup=Dedup(key=lambda recipient, p: f"{recipient}:{p.topic}:{p.n}", window_seconds=300),
        in_app=lambda recipient, p: InAppContent(title=f"Item {p.topic} {p.n}"),
    ),
    EventDefinition(
        type="rules.throttled_digest",
        schema=Item,
        default_channels=("in_app",),
        digest=Digest(key=lambda recipient, p: p.topic, window_seconds=3600, max_items=50),
        throttle=Throttle(
            key=lambda recipient, p: f"{recipient}:{p.topic}", limit=3, window_seconds=3600
        ),
        in_app=lambda recipient, p: InAppContent(title=f"Item {p.topic} {p.n}"),
    ),
]
