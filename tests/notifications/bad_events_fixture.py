"""An event module with a missing email template: start-up must fail naming the event."""

from __future__ import annotations

from pydantic import BaseModel

from tenantd.notifications import EmailContent, EventDefinition, InAppContent


class Payload(BaseModel):
    name: str


EVENTS = [
    EventDefinition(
        type="broken.template",
        schema=Payload,
        in_app=lambda recipient_id, p: InAppContent(title=p.name),
        email=lambda recipient_id, p: EmailContent(
            subject="x", template_path="templates/does-not-exist.txt", variables={}
        ),
    )
]
