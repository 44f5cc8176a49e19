"""Event types of the issue-18 notification tests: throttled, critical, digest-declared."""

from __future__ import annotations

from pydantic import BaseModel

from tenantd.notifications import Digest, EmailContent, EventDefinition, InAppContent, Throttle


class Alert(BaseModel):
    topic: str
    n: int = 0


EVENTS = [
    EventDefinition(
        type="alert.throttled",
        schema=Alert,
        default_channels=("in_app", "sse"),
        throttle=Throttle(
            key=lambda recipient, p: f"{recipient}:{p.topic}", limit=3, window_seconds=3600
        ),
        in_app=lambda recipient, p: InAppContent(title=f"Alert {p.topic} {p.n}"),
    ),
    EventDefinition(
        type="alert.critical",
        schema=Alert,
        default_channels=("in_app",),
        critical=True,
        in_app=lambda recipient, p: InAppContent(title=f"Critical {p.topic}"),
    ),
    EventDefinition(
        type="alert.digest",
        schema=Alert,
        default_channels=("in_app",),
        digest=Digest(key=lambda recipient, p: p.topic, window_seconds=3600, max_items=50),
        in_app=lambda recipient, p: InAppContent(title=f"Digest {p.topic}"),
    ),
    EventDefinition(
        type="alert.mailed_digest",
        schema=Alert,
        default_channels=("in_app", "email"),
        digest=Digest(key=lambda recipient, p: "all", window_seconds=3600, max_items=2),
        in_app=lambda recipient, p: InAppContent(title=f"Mailed {p.topic}"),
        email=lambda recipient, p: EmailContent(
            subject="Alerts", template_path="templates/digest.txt", variables={"topic": p.topic}
        ),
    ),
]
