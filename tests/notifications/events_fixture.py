"""Event types for the notification tests (tenantd itself ships none)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from tenantd.notifications import Dedup, EmailContent, EventDefinition, InAppContent


class CommentCreated(BaseModel):
    actorId: str
    commentId: str
    text: str = Field(min_length=1, max_length=500)


class ReportReady(BaseModel):
    reportName: str
    rows: int


class Ping(BaseModel):
    n: int = 0


EVENTS = [
    EventDefinition(
        type="comment.created",
        schema=CommentCreated,
        default_channels=("in_app", "email", "sse", "web_push"),
        dedup=Dedup(
            key=lambda recipient_id, p: f"c:{p.commentId}:{recipient_id}", window_seconds=300
        ),
        self_action_guard=lambda recipient_id, p: p.actorId == recipient_id,
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
        type="report.ready",
        schema=ReportReady,
        in_app=lambda recipient_id, p: InAppContent(title=f"Report {p.reportName} is ready"),
        email=lambda recipient_id, p: EmailContent(
            subject=f"Report {p.reportName}",
            template_path="templates/report.html",
            variables={"name": p.reportName, "rows": p.rows},
        ),
    ),
    EventDefinition(
        type="ping.simple",
        schema=Ping,
        default_channels=("in_app", "sse"),
        in_app=lambda recipient_id, p: InAppContent(title=f"Ping {p.n}", body="pong"),
    ),
]
