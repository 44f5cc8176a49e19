"""Change of a user's email address: requested by the signed-in user, confirmed by the new
address, announced to the old one with a "this wasn't me" link.

- The address changes only on confirmation (`POST /api/v1/users/me/email/confirm {token}`, by
  the same user, within EMAIL_CHANGE_TTL_HOURS).
- The old address is told at once; its link (`POST /api/v1/auth/email-change/cancel {token}`,
  no session needed) cancels a pending change or, within CANCEL_DAYS, changes the address back
  whatever came after (A->B->C: A's link brings A back and ends B->C), and ends every session
  of the user either way; the answer says which happened. A password set and a factor added
  while the address was away end with it (whoever held the address reset or added them).
- A request is limited per user and per recipient (`MAIL_RATE_LIMITS`), here in the action;
  its mails leave from a job after the answer, the same work whether or not the address is
  taken.
- Addresses compare in their normalised form: an address another user has is never taken
  (the requester learns nothing: the same answer, and that address is told instead), invitations
  and suppression rows follow the address (they are keyed on it), and the new address's own
  suppression row is cleared as a verified sign-up's is. Domain claims stay with accounts.
- Links mailed to the old address (verification, password reset) stop working on the change.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from urllib.parse import quote

import psycopg2.errors

from tenantd import audit
from tenantd.addresses import InvalidEmail, canonical_email, normalize_email
from tenantd.auth import mail, queries
from tenantd.bundle import Services
from tenantd.db import Conn
from tenantd.email.message import EmailMessage
from tenantd.errors import Conflict, NotFound, ValidationFailed
from tenantd.identity import queries as identity_queries
from tenantd.identity.events import user_changed
from tenantd.identity.sessions import revoke_all
from tenantd.identity.signin import AUTH_EMAIL
from tenantd.identity.tokens import new_opaque_token, token_hash
from tenantd.mfa import queries as mfa_queries
from tenantd.mfa import sensitive
from tenantd.mfa.service import after_factor_removed
from tenantd.ops.config import RateLimitSettings
from tenantd.ops.ratelimit import limit_chosen_recipient
from tenantd.principal import Principal
from tenantd.settings import Settings
from tenantd.suppression import service as suppression

log = logging.getLogger(__name__)

EMAIL_CHANGE_TTL_HOURS = 24
CANCEL_DAYS = 7
REQUESTED = "If the address can be used, a confirmation link is on its way to it."
EMAIL_CHANGE = "email_change"  # the auth.email job purpose that mails a requested change
MAIL_SCOPE = "email_change"  # its limit per user and per recipient (MAIL_RATE_LIMITS)


def _link(settings: Settings, path: str, token: str) -> str:
    return f"{settings.public_base_url.rstrip('/')}{path}?token={quote(token)}"


def bad_link() -> ValidationFailed:
    return ValidationFailed({"token": "This link is invalid, expired or already used"})


async def request_change(services: Services, actor: Principal, *, new_email: str) -> str:
    """Start a change (a sensitive action: step-up; the old address's notice link is its
    "This wasn't me"): count it against the mail limits, then queue the mails.

    The answer does the same work whether or not the address is taken (lock the user, count
    the limits, write the security event, queue one `auth.email` job of the same shape); the
    job decides and mails after the answer, so neither the answer nor its timing tells whether
    someone uses the address.
    """
    await sensitive.require(services, actor, sensitive.EMAIL_CHANGE_REQUESTED)
    user_id = actor.user_id
    try:
        new = canonical_email(new_email)
    except InvalidEmail as error:
        raise ValidationFailed({"newEmail": error.reason}) from None
    settings = services.settings
    async with services.db.transaction() as conn:
        user = await identity_queries.lock_user(conn, user_id)
        if user is None:
            raise NotFound("User not found")
        if normalize_email(user["email"]) == new:
            raise ValidationFailed({"newEmail": "this is already your address"})
        await limit_chosen_recipient(
            conn,
            settings.section(RateLimitSettings),
            secret_key=settings.secret_key,
            scope=MAIL_SCOPE,
            user_id=user_id,
            recipient=new,
        )
        await sensitive.performed(
            services,
            conn,
            actor=actor,
            action=sensitive.EMAIL_CHANGE_REQUESTED,
            data={"newEmail": new},
        )
        await services.jobs.enqueue(
            conn, AUTH_EMAIL, {"purpose": EMAIL_CHANGE, "userId": str(user_id), "email": new}
        )
    return REQUESTED


async def mail_change(services: Services, *, user_id: uuid.UUID, new_email: str) -> None:
    """The job's half of a request: a taken address is told so, a free one gets its link and
    the old address its notice with the "this wasn't me" link (mailed after commit)."""
    settings = services.settings
    new = normalize_email(new_email)
    outgoing: list[EmailMessage] = []
    async with services.db.transaction() as conn:
        user = await identity_queries.lock_user(conn, user_id)
        if user is None or normalize_email(user["email"]) == new:
            return  # gone, or the address changed to it meanwhile
        old = user["email"]
        if await queries.email_in_use(conn, new):
            outgoing.append(
                mail.own_text(
                    new,
                    "email_change_taken",
                    {"new_email": new, "base_url": settings.public_base_url},
                    settings,
                )
            )
        else:
            confirm, cancel = new_opaque_token(), new_opaque_token()
            await queries.drop_pending_email_changes(conn, user_id=user_id)
            await queries.insert_email_change(
                conn,
                user_id=user_id,
                old_email=old,
                new_email=new,
                confirm_hash=token_hash(settings.secret_key, confirm),
                cancel_hash=token_hash(settings.secret_key, cancel),
                ttl_hours=EMAIL_CHANGE_TTL_HOURS,
                cancel_days=CANCEL_DAYS,
            )
            await audit.record_user(
                conn,
                user_id,
                "user.email_change_requested",
                by=user_id,
                data={"newEmail": new},
            )
            outgoing.append(
                mail.own_text(
                    new,
                    "email_change_confirm",
                    {
                        "new_email": new,
                        "link": _link(settings, "/confirm-email", confirm),
                        "ttl_hours": EMAIL_CHANGE_TTL_HOURS,
                    },
                    settings,
                )
            )
            outgoing.append(
                mail.own_text(
                    old,
                    "email_change_notice",
                    {
                        "old_email": old,
                        "new_email": new,
                        "cancel_link": _link(settings, "/cancel-email-change", cancel),
                        "cancel_days": CANCEL_DAYS,
                    },
                    settings,
                )
            )
    for message in outgoing:  # after commit: a link in a mail always exists
        await mail.deliver_from_job(services, message)


@dataclass(frozen=True)
class Changed:
    user_id: uuid.UUID
    email: str


async def pending_new_email(services: Services, *, token: str) -> str | None:
    """The new address a live confirmation link names (for the confirm page), or None."""
    if not token:
        return None
    digest = token_hash(services.settings.secret_key, token)
    async with services.db.transaction() as conn:
        change = await queries.lock_email_change(conn, column="confirm_hash", token_hash=digest)
    if change is None or not change["confirmable"] or change["confirmed_at"] is not None:
        return None
    if change["cancelled_at"] is not None:
        return None
    return str(change["new_email"])


async def confirm_change(services: Services, *, user_id: uuid.UUID, token: str) -> Changed:
    """The new address confirmed: the user's email becomes it (verified)."""
    digest = token_hash(services.settings.secret_key, token)
    async with services.db.transaction() as conn:
        # The user row first, then the change (the order cancel_change keeps too).
        user = await identity_queries.lock_user(conn, user_id)
        change = await queries.lock_email_change(conn, column="confirm_hash", token_hash=digest)
        if (
            change is None
            or change["user_id"] != user_id
            or change["confirmed_at"] is not None
            or change["cancelled_at"] is not None
            or not change["confirmable"]
        ):
            raise bad_link()
        if user is None or normalize_email(user["email"]) != normalize_email(change["old_email"]):
            raise bad_link()  # the address changed some other way meanwhile
        new = change["new_email"]
        if await queries.email_in_use(conn, new):
            raise Conflict("Another account uses this address now")
        try:
            await identity_queries.set_user_email(conn, user_id=user_id, email=new)
        except psycopg2.errors.UniqueViolation:
            raise Conflict("Another account uses this address now") from None
        await queries.finish_email_change(conn, change_id=change["id"], outcome="confirmed_at")
        await identity_queries.drop_user_links(conn, user_id=user_id)
        await suppression.remove(conn, new)  # the mailbox just proved it works
        await audit.record_user(
            conn,
            user_id,
            "user.email_changed",
            by=user_id,
            data={"oldEmail": change["old_email"], "newEmail": new},
        )
        await user_changed(conn, "user.updated", user_id, previous={"email": user["email"]})
    log.info("user email changed", extra={"user_id": str(user_id)})
    return Changed(user_id=user_id, email=new)


async def _end_credentials_since(conn: Conn, user_id: uuid.UUID, since: dt.datetime) -> list[str]:
    """While the address was away (from the confirmation of the cancelled change on), the
    mail about the account went to whoever held it: a password reset there, and the
    notices (with their undo links) of a password or a factor added then. Whatever was set
    then ends with the cancel, or its holder signs straight back in: a password set or
    changed (the owner chooses a new one with "Forgot password", mailed to the address now
    back), an authenticator app or passkey added (the recovery codes go with the last
    factor). What ended, for the audit row."""
    ended = []
    if await identity_queries.drop_password_set_since(conn, user_id=user_id, since=since):
        ended.append("password")
    if await mfa_queries.delete_factors_since(conn, user_id=user_id, since=since):
        await after_factor_removed(conn, user_id)
        ended.append("factors")
    return ended


@dataclass(frozen=True)
class Cancelled:
    """What a "this wasn't me" link did: `restored` when the address went back to the one
    the link was mailed to; `kept` when it never left it; neither when another user holds
    that address now (the sessions ended all the same)."""

    restored: bool
    kept: bool

    @property
    def message(self) -> str:
        if self.restored:
            return RESTORED
        if self.kept:
            return KEPT
        return NOT_RESTORED


RESTORED = "The address of the account is yours again, and every session of it has ended."
KEPT = "The change is cancelled: the address stays yours, and every session has ended."
NOT_RESTORED = (
    "Every session of the account has ended, but its address could not be changed back: "
    "another account uses it now. Contact support."
)


async def cancel_change(services: Services, *, token: str) -> Cancelled:
    """ "This wasn't me": within CANCEL_DAYS the address the link was mailed to comes back,
    whatever changed after it (a second change A->B->C included), every later change and its
    links end, and every session of the user ends. Links of earlier changes keep working, so
    whoever holds an intermediate address cannot undo the original owner's cancel."""
    digest = token_hash(services.settings.secret_key, token)
    async with services.db.transaction() as conn:
        # The user row first, then the changes (as confirm_change): no deadlock with a
        # confirmation of a later change running at the same time.
        owner = await queries.email_change_owner(conn, column="cancel_hash", token_hash=digest)
        user = await identity_queries.lock_user(conn, owner) if owner is not None else None
        change = await queries.lock_email_change(conn, column="cancel_hash", token_hash=digest)
        if change is None or change["cancelled_at"] is not None or not change["cancellable"]:
            raise bad_link()
        if user is None:
            raise bad_link()
        user_id = change["user_id"]
        original = change["old_email"]
        current = user["email"]
        kept = normalize_email(current) == normalize_email(original)
        restored = False
        if not kept and not await queries.email_in_use(conn, original):
            await identity_queries.set_user_email(conn, user_id=user_id, email=original)
            await identity_queries.drop_user_links(conn, user_id=user_id)
            restored = True
        ended = []
        if not kept and change["confirmed_at"] is not None:
            ended = await _end_credentials_since(conn, user_id, change["confirmed_at"])
        # This change and every later one end (their links with them), confirmed or not.
        await queries.cancel_email_changes_since(conn, user_id=user_id, change_id=change["id"])
        await audit.record_user(
            conn,
            user_id,
            "user.email_change_cancelled",
            data={"reverted": restored, "newEmail": change["new_email"], "ended": ended},
        )
        if restored:
            await user_changed(conn, "user.updated", user_id, previous={"email": current})
        await revoke_all(conn, user_id=user_id)  # writes session.revoked_all
    log.warning("email change cancelled from the old address", extra={"user_id": str(user_id)})
    return Cancelled(restored=restored, kept=kept)
