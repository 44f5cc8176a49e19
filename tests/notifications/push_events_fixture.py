"""An event whose texts have no short limit, for the web push size tests."""

from __future__ import annotations

from pydantic import BaseModel, Field

from tenantd.notifications import EventDefinition, InAppContent


class BulletinPosted(BaseModel):
    title: str = Field(min_length=1, max_length=20_000)
    text: str = Field(min_length=1, max_length=20_000)


EVENTS = [
    EventDefinition(
        type="bulletin.posted",
        schema=BulletinPosted,
        default_channels=("in_app", "web_push"),
        in_app=lambda recipient_id, p: InAppContent(
            title=p.title, body=p.text, cta_url="/bulletins/latest", cta_label="Read"
        ),
    ),
]
