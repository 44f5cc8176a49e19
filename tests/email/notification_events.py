"""Event types of the notification email tests: the manual's own example (a text template and
a relative ctaUrl, docs/notifications.md) and an HTML-only template with a <title> and
relative links."""

from __future__ import annotations

from pydantic import BaseModel

from tenantd.notifications import EmailContent, EventDefinition, InAppContent


class CommentCreated(BaseModel):
    actorId: str
    commentId: str
    text: str


class DigestReady(BaseModel):
    title: str
    commentId: str


EVENTS = [
    EventDefinition(
        type="comment.created",
        schema=CommentCreated,
        default_channels=("in_app", "email"),
        in_app=lambda recipient_id, p: InAppContent(
            title="New comment", body=p.text, cta_url=f"/c/{p.commentId}", cta_label="Open"
        ),
        email=lambda recipient_id, p: EmailContent(
            subject="New comment",
            template_path="templates/comment.txt",
            variables={"text": p.text},
        ),
    ),
    EventDefinition(
        type="digest.ready",
        schema=DigestReady,
        default_channels=("in_app", "email"),
        in_app=lambda recipient_id, p: InAppContent(
            title=p.title, body="Your digest", cta_url=f"/c/{p.commentId}", cta_label="Read"
        ),
        email=lambda recipient_id, p: EmailContent(
            subject=p.title,
            template_path="templates/digest.html",
            variables={"heading": p.title},
        ),
    ),
]
