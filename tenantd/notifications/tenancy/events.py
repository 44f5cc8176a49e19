"""The built-in tenancy event types. Names start with `tenantd.`, a prefix an application's
own events must not use, so they never clash with TENANTD_EVENT_MODULES nor read like the
outbox's event types (`membership.created` is the change; `tenantd.member.joined` is telling
someone about it).

Channels: every one is in-app and live (SSE, web push when configured). Email only where no
transactional email already tells the recipient: the invitee is mailed the invitation and the
owner the join request, so those two are not emailed twice.
"""

from __future__ import annotations

from pydantic import BaseModel

from tenantd.notifications.registry import Dedup, EmailContent, EventDefinition, InAppContent

INVITATION_RECEIVED = "tenantd.invitation.received"
MEMBER_JOINED = "tenantd.member.joined"
JOIN_REQUEST_RECEIVED = "tenantd.join_request.received"
ROLE_CHANGED = "tenantd.member.role_changed"

LIVE = ("in_app", "sse", "web_push")
DAY = 86_400


class Tenancy(BaseModel):
    accountId: str
    accountName: str
    actorUserId: str = ""  # who made the change; never told about their own action


class InvitationReceived(Tenancy):
    invitationId: str
    role: str
    inviterName: str
    email: str


class MemberJoined(Tenancy):
    membershipId: str
    memberUserId: str
    memberName: str
    role: str


class JoinRequestReceived(Tenancy):
    requestId: str
    requesterName: str
    domain: str


class RoleChanged(Tenancy):
    membershipId: str
    role: str
    previousRole: str
    actorName: str


def _by_actor(recipient: str, payload: Tenancy) -> bool:
    return payload.actorUserId == recipient


def _invitation(recipient: str, p: InvitationReceived) -> InAppContent:
    return InAppContent(
        title=f"{p.inviterName} invited you to {p.accountName}",
        body=f"You are invited as {p.role}. Open the invitation email sent to {p.email} to join.",
    )


def _joined(recipient: str, p: MemberJoined) -> InAppContent:
    return InAppContent(
        title=f"{p.memberName} joined {p.accountName}",
        body=f"They are a member as {p.role}.",
        cta_url=f"/accounts/{p.accountId}/members",
        cta_label="See members",
    )


def _joined_email(recipient: str, p: MemberJoined) -> EmailContent:
    return EmailContent(
        subject=f"{p.memberName} joined {p.accountName}",
        template_path="templates/member_joined.html",
        variables={"member": p.memberName, "account_name": p.accountName, "role": p.role},
    )


def _join_request(recipient: str, p: JoinRequestReceived) -> InAppContent:
    return InAppContent(
        title=f"{p.requesterName} asks to join {p.accountName}",
        body=f"They signed up with an address on {p.domain}, which the account has claimed.",
        cta_url="/join-requests",
        cta_label="Review the request",
    )


def _role(recipient: str, p: RoleChanged) -> InAppContent:
    return InAppContent(
        title=f"You are now {p.role} of {p.accountName}",
        body=f"{p.actorName} changed your role from {p.previousRole} to {p.role}.",
        cta_url="/accounts",
        cta_label="Your accounts",
    )


def _role_email(recipient: str, p: RoleChanged) -> EmailContent:
    return EmailContent(
        subject=f"You are now {p.role} of {p.accountName}",
        template_path="templates/role_changed.html",
        variables={
            "account_name": p.accountName,
            "actor": p.actorName,
            "role": p.role,
            "previous_role": p.previousRole,
        },
    )


EVENTS = [
    EventDefinition(
        type=INVITATION_RECEIVED,
        schema=InvitationReceived,
        default_channels=LIVE,
        dedup=Dedup(key=lambda r, p: f"{p.invitationId}:{r}", window_seconds=DAY),
        self_action_guard=_by_actor,
        in_app=_invitation,
    ),
    EventDefinition(
        type=MEMBER_JOINED,
        schema=MemberJoined,
        default_channels=("in_app", "email", "sse", "web_push"),
        dedup=Dedup(key=lambda r, p: f"{p.membershipId}:{r}", window_seconds=DAY),
        self_action_guard=_by_actor,
        in_app=_joined,
        email=_joined_email,
    ),
    EventDefinition(
        type=JOIN_REQUEST_RECEIVED,
        schema=JoinRequestReceived,
        default_channels=LIVE,
        dedup=Dedup(key=lambda r, p: f"{p.requestId}:{r}", window_seconds=DAY),
        self_action_guard=_by_actor,
        in_app=_join_request,
    ),
    EventDefinition(
        type=ROLE_CHANGED,
        schema=RoleChanged,
        default_channels=("in_app", "email", "sse", "web_push"),
        self_action_guard=_by_actor,
        in_app=_role,
        email=_role_email,
    ),
]
