"""Sensitive actions (issue 25): one list, one guard, one notice with a "This wasn't me" link.

A sensitive action is performed by a service function that every entry point calls (the API
view, the hosted page, the JS client through the API). That function, and not a view:

1. calls `require(services, actor, ACTION)` before it changes anything: an operator's
   impersonation session (the `act` claim) is refused (403 IMPERSONATION); a session whose
   `auth_time` is older than REAUTH_MAX_AGE_SECONDS is refused (403 REAUTH_REQUIRED; a hosted
   page shows the step-up form and performs nothing). The operator (`OPERATOR`, the CLI) is
   exempt; its commands are audited.
2. calls `performed(...)` in the transaction of the change: it writes the security event and
   the undo row, and queues the notice mailed to the user (after commit) with a "This wasn't
   me" link (`/wasnt-me?token=T`, `POST /api/v1/auth/security/undo {token}`) that undoes the
   action and ends every session (tenantd/auth/security_undo.py says what undo means for
   each). `performed` refuses to run (a server error) unless `require` ran for the same
   action in the same task, so a function that forgets the guard cannot perform the action.

`ACTIONS` is the list (docs/security-actions.md is its table); `performed_by` names the
functions that perform each, which tests/test_sensitive_routes.py checks statically and drives
through every route of the route table (API and pages).
"""

from __future__ import annotations

import datetime as dt
import hmac
import uuid
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tenantd.audit import security
from tenantd.db import Conn, Row
from tenantd.email.message import EmailMessage
from tenantd.identity.stepup import require_recent_auth
from tenantd.identity.tokens import token_hash
from tenantd.jobs.kinds import JobInfo, JobKind, PermanentJobError
from tenantd.jobs.payload import malformed_payload_is_permanent
from tenantd.mfa import queries
from tenantd.mfa.errors import Impersonation
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.bundle import Services
    from tenantd.mfa.domain import Mfa
    from tenantd.principal import Principal

UNDO_DAYS = 7
NOTICE_JOB = "security.notice"
UNDO_PATH = "/wasnt-me"


@dataclass(frozen=True)
class Sensitive:
    """One sensitive action: its security-event kind, how the notice names it, what its
    "This wasn't me" link does, and the service functions that perform it."""

    name: str
    label: str
    undo: str
    performed_by: tuple[str, ...]
    notice: bool = True  # False: the action mails its own notice and undo link


TOTP_ADDED = Sensitive(
    "totp_added",
    "An authenticator app was added to your account",
    "removes that authenticator app",
    ("tenantd.mfa.service.setup_totp", "tenantd.mfa.service.confirm_totp"),
)
TOTP_REMOVED = Sensitive(
    "totp_removed",
    "The authenticator app was removed from your account",
    "puts the authenticator app back",
    ("tenantd.mfa.service.disable_totp",),
)
PASSKEY_ADDED = Sensitive(
    "passkey_added",
    "A passkey was added to your account",
    "removes that passkey",
    ("tenantd.mfa.passkeys.registration_options", "tenantd.mfa.passkeys.register"),
)
PASSKEY_REMOVED = Sensitive(
    "passkey_removed",
    "A passkey was removed from your account",
    "puts the passkey back",
    ("tenantd.mfa.passkeys.delete",),
)
RECOVERY_CODES_REGENERATED = Sensitive(
    "recovery_codes_regenerated",
    "New recovery codes were made for your account",
    "ends the new codes and brings back the unused old ones",
    ("tenantd.mfa.service.regenerate_recovery_codes",),
)
EMAIL_CHANGE_REQUESTED = Sensitive(
    "email_change_requested",
    "A change of your email address was requested",
    "cancels the change, or changes the address back (the link of the email-change notice)",
    ("tenantd.auth.email_change.request_change",),
    notice=False,
)
PASSWORD_CHANGED = Sensitive(
    "password_changed",
    "The password of your account was changed (or set)",
    'removes the password (whoever changed it knows it): choose a new one with "Forgot password"',
    ("tenantd.auth.service.change_password",),
)
ACCOUNT_DELETED = Sensitive(
    "account_deleted",
    "An account you own was deleted",
    "restores the account",
    ("tenantd.accounts.service.delete_account",),
)
ACCOUNT_RESTORED = Sensitive(
    "account_restored",
    "A deleted account you own was restored",
    "deletes the account again",
    ("tenantd.accounts.restore.restore_account",),
)
OWNERSHIP_TRANSFERRED = Sensitive(
    "ownership_transferred",
    "You transferred the ownership of an account",
    "gives the ownership back to you",
    ("tenantd.accounts.memberships.transfer_ownership",),
)
MFA_POLICY_CHANGED = Sensitive(
    "account_mfa_policy_changed",
    "The two-factor requirement of an account you own was changed",
    "sets the requirement back",
    ("tenantd.accounts.service.set_require_mfa",),
)
USER_DELETED = Sensitive(
    "user_deleted",
    "Your user was deleted",
    "restores your user, its address and the accounts deleted with it (memberships in other"
    ' accounts stay revoked; sign in with "Forgot password")',
    ("tenantd.auth.deletion.delete_user",),
)

ACTIONS: tuple[Sensitive, ...] = (
    TOTP_ADDED,
    TOTP_REMOVED,
    PASSKEY_ADDED,
    PASSKEY_REMOVED,
    RECOVERY_CODES_REGENERATED,
    EMAIL_CHANGE_REQUESTED,
    PASSWORD_CHANGED,
    ACCOUNT_DELETED,
    ACCOUNT_RESTORED,
    OWNERSHIP_TRANSFERRED,
    MFA_POLICY_CHANGED,
    USER_DELETED,
)
BY_NAME = {action.name: action for action in ACTIONS}


class Operator:
    """The operator (the CLI): exempt from step-up; its commands write audit rows."""

    def __repr__(self) -> str:
        return "OPERATOR"


OPERATOR = Operator()


class UnguardedAction(RuntimeError):
    """A sensitive action was about to be performed without its guard (a bug: 500)."""


_guarded: ContextVar[frozenset[str]] = ContextVar("sensitive_guarded", default=frozenset())


async def require(services: Services, actor: Principal | Operator, action: Sensitive) -> None:
    """The guard of every sensitive action: never in an operator's impersonation session (403
    IMPERSONATION), and a recent sign-in (403 REAUTH_REQUIRED otherwise); the operator is
    exempt. Remembers, for this task, that the guard of `action` ran."""
    if not isinstance(actor, Operator):
        if actor.act is not None:
            raise Impersonation()
        await require_recent_auth(services, actor)
    _guarded.set(_guarded.get() | {action.name})


def guard_ran(action: Sensitive) -> bool:
    """Whether `require` ran for `action` in this task (and `performed` has not used it)."""
    return action.name in _guarded.get()


def _consume(action: Sensitive) -> None:
    names = _guarded.get()
    if action.name not in names:
        raise UnguardedAction(f"sensitive action {action.name} performed without its guard")
    _guarded.set(names - {action.name})


def undo_token(settings: Settings, undo_id: uuid.UUID) -> str:
    """The link's token: derived from the row id with the server secret (never stored)."""
    return hmac.digest(
        settings.secret_key.encode(), f"security-undo:{undo_id}".encode(), "sha256"
    ).hex()


def undo_hash(settings: Settings, token: str) -> bytes:
    return token_hash(settings.secret_key, "security-undo:" + token)


def undo_link(settings: Settings, token: str) -> str:
    return f"{settings.public_base_url.rstrip('/')}{UNDO_PATH}?token={quote(token)}"


async def performed(
    services: Services,
    conn: Conn,
    *,
    actor: Principal | Operator,
    action: Sensitive,
    user_id: uuid.UUID | None = None,
    undo: dict[str, Any] | None = None,
    data: dict[str, Any] | None = None,
    event: bool = True,
) -> None:
    """In the action's transaction: the security event, and (for a user's own action) the
    undo row and the notice mailed after commit. `user_id`: the user acted on, the actor's
    own unless given (the operator always names one); `undo`: what undoing needs;
    `event=False` when the flow writes its own security event (password changes)."""
    _consume(action)
    if user_id is None:
        if isinstance(actor, Operator):
            raise TypeError("the operator's sensitive action names the user it acts on")
        user_id = actor.user_id
    operator = isinstance(actor, Operator)
    details = dict(data or {})
    if operator:
        details["by"] = "operator"
    if event:
        await security.record(
            conn,
            user_id=user_id,
            kind=action.name,
            session_id=None if isinstance(actor, Operator) else actor.session_id,
            data=details,
        )
    if operator or not action.notice:
        return
    to = await queries.notice_address(conn, user_id)
    if to is None:
        return
    undo_id = uuid.uuid4()
    token = undo_token(services.settings, undo_id)
    await queries.insert_undo(
        conn,
        undo_id=undo_id,
        user_id=user_id,
        action=action.name,
        notify_to=to,
        data=undo or {},
        token_hash=undo_hash(services.settings, token),
        days=UNDO_DAYS,
    )
    await services.jobs.enqueue(conn, NOTICE_JOB, {"undoId": str(undo_id)})


async def lock_undo(conn: Conn, settings: Settings, token: str) -> Row | None:
    """The live, unused undo row of a link's token (locked), or None."""
    return await queries.lock_undo(conn, undo_hash(settings, token))


def notice(settings: Settings, row: Row) -> EmailMessage:
    """The mail of one sensitive action: what happened, when, and the undo link."""
    action = BY_NAME.get(str(row["action"]))
    if action is None:
        raise PermanentJobError(f"unknown sensitive action: {row['action']!r}")
    when: dt.datetime = row["created_at"]
    link = undo_link(settings, undo_token(settings, row["id"]))
    text = (
        f"{action.label} on {when:%Y-%m-%d at %H:%M} UTC.\n\n"
        "If this was you, there is nothing to do.\n\n"
        f"If this wasn't you, open this link within {UNDO_DAYS} days: it {action.undo},"
        " and signs out every session of your account:\n"
        f"{link}\n"
    )
    return EmailMessage(
        to=str(row["notify_to"]), subject=action.label, text=text, tag=f"security_{action.name}"
    )


async def run_notice(services: Mfa, payload: dict[str, Any], job: JobInfo) -> None:
    with malformed_payload_is_permanent("security notice"):
        undo_id = uuid.UUID(str(payload["undoId"]))
    async with services.db.connection() as conn:
        row = await queries.undo_row(conn, undo_id)
    if row is None:
        return  # the user is gone
    await services.email.send_from_job(notice(services.settings, row))  # suppression first


JOB_KINDS = (JobKind(name=NOTICE_JOB, run=run_notice, max_attempts=5, timeout=60.0),)
