"""Account mail (invitations, join requests): one durable job, submitted with the change.

A change submits an `accounts.email` job in its own transaction, so a rolled-back change
mails nothing and a provider failure is retried by the job queue. The payload carries ids
only, and for an invitation the seed its token is derived from: the token is
HMAC(SECRET_KEY, seed), the database keeps HMAC(SECRET_KEY, token) as ever, so neither the
jobs table nor the invitations table opens an invitation without the server's key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tenantd.accounts import queries
from tenantd.accounts.names import account_name
from tenantd.db import Conn
from tenantd.email import templates
from tenantd.email.message import EmailMessage, job_mail_key
from tenantd.jobs.kinds import JobInfo, JobKind, PermanentJobError
from tenantd.jobs.payload import malformed_payload_is_permanent

if TYPE_CHECKING:
    from tenantd.bundle import Services
    from tenantd.settings import Settings

ACCOUNT_EMAIL = "accounts.email"
INVITATION = "invitation"
JOIN_REQUEST = "join_request"  # to the owner of the claiming account
JOIN_REQUEST_SENT = "join_request_sent"  # to the requester


def _shipped(to: str, name: str, variables: dict[str, Any], settings: Settings) -> EmailMessage:
    subject, text, html = templates.render(name, variables, brand=templates.brand_of(settings))
    return EmailMessage(to=to, subject=subject, text=text, html=html, tag=name)


def join_request(
    to: str,
    *,
    settings: Settings,
    requester: str,
    domain: str,
    account_id: uuid.UUID,
    account_name: str,
) -> EmailMessage:
    link = f"{settings.public_base_url.rstrip('/')}/accounts/{account_id}/join-requests"
    return _shipped(
        to,
        "join_request",
        {"requester": requester, "domain": domain, "account_name": account_name, "link": link},
        settings,
    )


def join_request_sent(to: str, *, settings: Settings, domain: str) -> EmailMessage:
    """To the requester: a join request was sent, and its owner and admins see the address."""
    return _shipped(to, "join_request_sent", {"email": to, "domain": domain}, settings)


# -- invitation links -------------------------------------------------------------------------


def new_invitation_seed() -> str:
    return secrets.token_hex(32)


def invitation_token(secret_key: str, seed: str) -> str:
    """The raw invitation token (256 bits, URL-safe), derived from a random seed."""
    mac = hmac.new(
        secret_key.encode(), b"tenantd.invitation\x00" + bytes.fromhex(seed), hashlib.sha256
    ).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode()


# -- submitting (in the caller's transaction) -------------------------------------------------


async def submit_invitation(
    services: Services,
    conn: Conn,
    *,
    invitation_id: uuid.UUID,
    seed: str,
    inviter_id: uuid.UUID,
) -> None:
    """Queue the invitee's mail with the change that made its link (mailed after commit)."""
    payload = {
        "purpose": INVITATION,
        "invitationId": str(invitation_id),
        "seed": seed,
        "inviterId": str(inviter_id),
    }
    await services.jobs.enqueue(conn, ACCOUNT_EMAIL, payload)


async def submit_join_request(
    services: Services, conn: Conn, *, join_request_id: uuid.UUID
) -> None:
    """Queue the owner's notice and the requester's `join_request_sent` notice."""
    for purpose in (JOIN_REQUEST, JOIN_REQUEST_SENT):
        payload = {"purpose": purpose, "joinRequestId": str(join_request_id)}
        await services.jobs.enqueue(conn, ACCOUNT_EMAIL, payload)


# -- the job ----------------------------------------------------------------------------------


async def _invitation_message(services: Services, payload: dict[str, Any]) -> EmailMessage | None:
    invitation_id = uuid.UUID(payload["invitationId"])
    async with services.db.connection() as conn:
        invitation = await queries.invitation_mail(conn, invitation_id)
        inviter = await queries.user_display(conn, uuid.UUID(payload["inviterId"]))
    if invitation is None or invitation["accepted_at"] or invitation["revoked_at"]:
        return None  # gone, accepted or withdrawn before its mail left
    settings = services.settings
    token = invitation_token(settings.secret_key, payload["seed"])
    link = f"{settings.public_base_url}/invitations/accept?token={quote(token, safe='')}"
    inviter_name = (
        account_name(inviter["first_name"], inviter["last_name"], inviter["email"])
        if inviter
        else "Someone"
    )
    return _shipped(
        invitation["email"],
        "invitation",
        {
            "inviter": inviter_name,
            "account_name": invitation["account_name"],
            "role": invitation["role"],
            "link": link,
        },
        settings,
    )


async def _join_request_message(
    services: Services, payload: dict[str, Any], purpose: str
) -> EmailMessage | None:
    async with services.db.connection() as conn:
        request = await queries.join_request_mail(conn, uuid.UUID(payload["joinRequestId"]))
    if request is None:
        return None
    if purpose == JOIN_REQUEST_SENT:
        return join_request_sent(
            request["requester"], settings=services.settings, domain=request["domain"]
        )
    if request["owner_email"] is None:
        return None
    return join_request(
        request["owner_email"],
        settings=services.settings,
        requester=request["requester"],
        domain=request["domain"],
        account_id=request["account_id"],
        account_name=request["account_name"],
    )


async def run_account_email(services: Services, payload: dict[str, Any], job: JobInfo) -> None:
    """Build the mail from what the database holds now and send it; provider errors retry."""
    purpose = payload.get("purpose")
    with malformed_payload_is_permanent("account mail"):
        if purpose == INVITATION:
            message = await _invitation_message(services, payload)
        elif purpose in (JOIN_REQUEST, JOIN_REQUEST_SENT):
            message = await _join_request_message(services, payload, purpose)
        else:
            raise PermanentJobError(f"unknown account mail job: {sorted(payload)}")
    if message is not None:
        with job_mail_key(job.id, ACCOUNT_EMAIL):  # a run again does not mail twice
            await services.email.send_from_job(message)


JOB_KINDS = (JobKind(name=ACCOUNT_EMAIL, run=run_account_email, max_attempts=5, timeout=60.0),)
