"""The outbox consumer that turns tenancy changes into the built-in notifications.

It runs in the relay's sequencing transaction, which numbers each committed event once, so
each change is told once; `send_many` with that connection writes the dispatch jobs (queues on)
or the notifications themselves (queues off) in the same transaction. A failure here is logged
and rolled back to a savepoint: it must never hold back the sequencer (webhooks, events API).
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from tenantd.db import Conn, Row
from tenantd.identity import permissions
from tenantd.notifications.domain import Notifications
from tenantd.notifications.service import SendRequest, send_many
from tenantd.notifications.tenancy import events, queries
from tenantd.outbox import Consumer

log = logging.getLogger(__name__)


DEALS_WITH = {
    "membership.created": permissions.MEMBERS_INVITE,
    "join_request.created": permissions.JOIN_REQUESTS_DECIDE,
}
WATCHED = ("invitation.created", "membership.created", "join_request.created")
WATCHED_ROLE = "membership.role_changed"


def _actor(event: Row) -> str:
    """The acting user's id, or '' for an operator, the system or an API key."""
    return str(event["actor_id"]) if event["actor_type"] == "user" and event["actor_id"] else ""


async def _context(conn: Conn, event: Row, subject: str | None) -> Row | None:
    return await conn.fetch_one(
        queries.ACCOUNT,
        {"aid": event["account_id"], "actor": _actor(event) or None, "subject": subject},
    )


def _common(event: Row, context: Row) -> dict[str, str]:
    """What every built-in tenancy notification's payload starts with."""
    return {
        "accountId": str(event["account_id"]),
        "accountName": context["account_name"],
        "actorUserId": _actor(event),
    }


async def _requests(conn: Conn, event: Row) -> list[SendRequest]:
    """The notifications one outbox event asks for (none for most)."""
    data: dict[str, Any] = event["data"] or {}
    kind = event["type"]
    account_id = event["account_id"]
    if account_id is None:
        return []
    if kind == "invitation.created":
        invitee = await conn.fetch_val(queries.USER_BY_EMAIL, {"email": data["email"]})
        context = await _context(conn, event, None)
        if invitee is None or context is None:
            return []  # no user yet: the invitation email is all they get
        payload = {
            **_common(event, context),
            "invitationId": str(data["id"]),
            "role": str(data["role"]),
            "inviterName": context["actor_name"] or "Someone",
            "email": str(data["email"]),
        }
        return [SendRequest(events.INVITATION_RECEIVED, invitee, payload)]
    if kind in ("membership.created", "join_request.created"):
        member = str(data["userId"])
        context = await _context(conn, event, member)
        if context is None:
            return []
        managers = await conn.fetch_all(
            queries.MANAGERS,
            {
                "aid": account_id,
                "except": member,
                "at": event["occurred_at"],
                "permission": DEALS_WITH[kind],
            },
        )
        common = _common(event, context)
        if kind == "membership.created":
            event_type = events.MEMBER_JOINED
            payload = {
                **common,
                "membershipId": str(data["id"]),
                "memberUserId": member,
                "memberName": context["subject_name"] or "Someone",
                "role": str(data["role"]),
            }
        else:
            event_type = events.JOIN_REQUEST_RECEIVED
            payload = {
                **common,
                "requestId": str(data["id"]),
                "requesterName": context["subject_name"] or "Someone",
                "domain": str(data.get("domain") or ""),
            }
        return [
            SendRequest(event_type, row["user_id"], payload, account_id=account_id)
            for row in managers
        ]
    if kind == WATCHED_ROLE:
        member = str(data["userId"])
        context = await _context(conn, event, member)
        if context is None:
            return []
        payload = {
            **_common(event, context),
            "membershipId": str(data["id"]),
            "role": str(data["role"]),
            "previousRole": str((event["previous"] or {}).get("role") or ""),
            "actorName": context["actor_name"] or "An administrator",
        }
        return [SendRequest(events.ROLE_CHANGED, uuid.UUID(member), payload, account_id=account_id)]
    return []


def tenancy_feed(services: Notifications) -> Consumer:
    """The relay consumer that sends the built-in notifications of `services`."""

    async def consume(conn: Conn, rows: list[Row]) -> None:
        wanted = [row for row in rows if row["type"] in WATCHED or row["type"] == WATCHED_ROLE]
        if not wanted:
            return
        await conn.execute("SAVEPOINT tenancy_notifications")
        try:
            requests = [request for row in wanted for request in await _requests(conn, row)]
            if requests:
                await send_many(services, requests, conn=conn)
        except Exception:
            await conn.execute("ROLLBACK TO SAVEPOINT tenancy_notifications")
            log.exception("built-in tenancy notifications failed; the events go on without them")
            return
        await conn.execute("RELEASE SAVEPOINT tenancy_notifications")

    return consume
