"""Sign-up, email verification, sign-in and password reset: the rules of these flows.

Lock order everywhere a user's email tokens change: the user row first, then token rows,
so concurrent sign-ups, resends, verifications and resets of one user serialise without
deadlocks.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from tenantd.accounts.provisioning import DomainConflict, provision_personal_account
from tenantd.auth import mail, queries
from tenantd.auth.passwords import hash_password, needs_rehash, verify_password
from tenantd.auth.sessions import IssuedTokens, issue_session, revoke_all, rotate, rotate_fast
from tenantd.auth.tokens import new_opaque_token, token_hash
from tenantd.db import Conn, Row
from tenantd.email import suppression
from tenantd.email.addresses import canonical_email, normalize_email
from tenantd.errors import DomainClaimed, EmailNotVerified, InvalidCredentials, ValidationFailed
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.services import Services

log = logging.getLogger(__name__)

VERIFY = "verify_email"
RESET = "password_reset"
AUTH_EMAIL = "auth.email"  # the job kind that sends both (tenantd/auth/jobs.py)
VERIFY_TTL = dt.timedelta(hours=mail.VERIFY_TTL_HOURS)
RESET_TTL = dt.timedelta(hours=1)

REGISTER_MESSAGE = "Check your inbox: we sent a link to confirm the address."
RESEND_MESSAGE = "If the address belongs to an unverified sign-up, a new link is on its way."
RESET_MESSAGE = "If an account uses this address, a password reset link is on its way."


@dataclass(frozen=True)
class SignedIn:
    """A new session and the body to answer with (cookies are the view's business)."""

    tokens: IssuedTokens
    body: dict[str, Any]


@dataclass(frozen=True)
class ClientMeta:
    user_agent: str | None = None
    ip: str | None = None


def user_json(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "email": row["email"],
        "firstName": row["first_name"],
        "lastName": row["last_name"],
        "emailVerifiedAt": row["email_verified_at"],
    }


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _link(settings: Settings, path: str, token: str) -> str:
    return f"{settings.public_base_url.rstrip('/')}{path}?token={quote(token)}"


def bad_token() -> ValidationFailed:
    # Unknown, expired and already used look the same: nothing to learn from probing.
    return ValidationFailed({"token": "This link is invalid, expired or already used"})


async def _new_user_token(
    conn: Conn,
    settings: Settings,
    *,
    user_id: uuid.UUID,
    purpose: str,
    ttl: dt.timedelta,
    password_hash: str | None = None,
) -> str:
    """Rotate: older tokens of this purpose stop working; only the hash of the new one is kept."""
    await queries.delete_user_tokens(conn, user_id=user_id, purpose=purpose)
    token = new_opaque_token()
    await queries.insert_user_token(
        conn,
        token_hash=token_hash(settings.secret_key, token),
        user_id=user_id,
        purpose=purpose,
        expires_at=_now() + ttl,
        password_hash=password_hash,
    )
    return token


async def register(
    services: Services, *, email: str, password: str, first_name: str = "", last_name: str = ""
) -> str:
    """Create an unverified user and mail a verification link; same answer for a known email."""
    settings = services.settings
    # Hash first, whatever the outcome, so timing does not tell whether the address exists.
    password_hash = await hash_password(password)
    email = canonical_email(email)
    outgoing: mail.Outgoing
    async with services.db.transaction() as conn:
        user_id = await queries.insert_user(
            conn, email=email, first_name=first_name.strip(), last_name=last_name.strip()
        )
        if user_id is not None:
            await queries.set_password(conn, user_id=user_id, password_hash=password_hash)
            token = await _new_user_token(
                conn, settings, user_id=user_id, purpose=VERIFY, ttl=VERIFY_TTL
            )
            outgoing = mail.verification(
                email, link=_link(settings, "/verify-email", token), first_name=first_name
            )
        else:
            user = await queries.lock_user_by_email(conn, email)
            assert user is not None  # the insert conflicted on this address
            if user["email_verified_at"] is None:
                # A fresh link that installs the password of THIS sign-up when used, so the
                # mailbox owner's choice wins over an earlier sign-up by someone else.
                token = await _new_user_token(
                    conn,
                    settings,
                    user_id=user["id"],
                    purpose=VERIFY,
                    ttl=VERIFY_TTL,
                    password_hash=password_hash,
                )
                outgoing = mail.verification(
                    user["email"],
                    link=_link(settings, "/verify-email", token),
                    first_name=user["first_name"],
                )
            else:
                outgoing = mail.account_exists(user["email"], settings=settings)
    await mail.deliver(services, outgoing)
    return REGISTER_MESSAGE


async def resend_verification(services: Services, *, email: str) -> str:
    """Queue a fresh verification link for the address; same answer and work either way.

    The lookup and the mail run in a job (`auth.email`), so neither the answer nor its
    timing (a slow email provider) tells whether the address has an unverified sign-up.
    """
    await _submit_mail(services, VERIFY, email)
    return RESEND_MESSAGE


async def mail_verification_link(services: Services, email: str) -> None:
    """The job's half: a new link for an unverified user; older links stop working."""
    settings = services.settings
    outgoing: mail.Outgoing | None = None
    async with services.db.transaction() as conn:
        user = await queries.lock_user_by_email(conn, normalize_email(email))
        if user is not None and user["email_verified_at"] is None:
            carried = await queries.latest_token_password(conn, user_id=user["id"])
            token = await _new_user_token(
                conn,
                settings,
                user_id=user["id"],
                purpose=VERIFY,
                ttl=VERIFY_TTL,
                password_hash=carried,
            )
            outgoing = mail.verification(
                user["email"],
                link=_link(settings, "/verify-email", token),
                first_name=user["first_name"],
            )
    if outgoing is not None:
        await mail.deliver(services, outgoing)


async def _submit_mail(services: Services, purpose: str, email: str) -> None:
    await services.jobs.submit(
        services, AUTH_EMAIL, {"purpose": purpose, "email": normalize_email(email)}
    )


async def _lock_token(conn: Conn, settings: Settings, *, token: str, purpose: str) -> Row:
    """Lock the token's user, then the token; refuse unknown, expired or used tokens."""
    digest = token_hash(settings.secret_key, token)
    user_id = await queries.token_owner(conn, token_hash=digest, purpose=purpose)
    if user_id is None:
        raise bad_token()
    user = await queries.lock_user(conn, user_id)
    row = await queries.lock_user_token(conn, token_hash=digest, purpose=purpose)
    if user is None or row is None or row["used_at"] is not None or row["expires_at"] <= _now():
        raise bad_token()
    # Single use: this token and every sibling of its purpose are gone with this transaction.
    await queries.delete_user_tokens(conn, user_id=user_id, purpose=purpose)
    return {"user": user, "token": row}


async def verify_email(services: Services, *, token: str, client: ClientMeta) -> SignedIn:
    """Verify the address, provision the personal account and sign in, in one transaction.

    On a claimed domain the join request is committed first, then DOMAIN_CLAIMED is raised
    and the account owner is told by email.
    """
    settings = services.settings
    conflict: DomainConflict | None = None
    owner: Row | None = None
    async with services.db.transaction() as conn:
        locked = await _lock_token(conn, settings, token=token, purpose=VERIFY)
        user_id: uuid.UUID = locked["user"]["id"]
        if locked["token"]["password_hash"] is not None:
            await queries.set_password(
                conn, user_id=user_id, password_hash=locked["token"]["password_hash"]
            )
        user = await queries.mark_email_verified(conn, user_id)
        await suppression.remove(conn, user["email"])
        outcome = await provision_personal_account(conn, settings, user_id=user_id)
        if outcome.conflict is not None:
            conflict = outcome.conflict
            owner = await queries.account_owner(conn, conflict.account_id)
        else:
            assert outcome.account_id is not None
            account = await queries.account_ref(conn, outcome.account_id)
            body = {"user": user_json(user), "account": account}
            tokens = await issue_session(
                conn,
                settings,
                user_id=user_id,
                account_id=outcome.account_id,
                user_agent=client.user_agent,
                ip=client.ip,
            )
    if conflict is not None:
        # Committed above: the join request survives; now tell the owner, then the caller.
        if owner is not None:
            await mail.deliver(
                services,
                mail.join_request(
                    owner["email"],
                    settings=settings,
                    requester=user["email"],
                    domain=conflict.domain,
                    account_id=conflict.account_id,
                    account_name=owner["account_name"],
                ),
            )
        await mail.deliver(services, mail.join_request_sent(user["email"], domain=conflict.domain))
        raise DomainClaimed(
            details={"accountId": str(conflict.account_id), "domain": conflict.domain}
        )
    return SignedIn(tokens, body)


async def login(services: Services, *, email: str, password: str, client: ClientMeta) -> SignedIn:
    """Password sign-in; unknown email and wrong password are indistinguishable."""
    settings = services.settings
    async with services.db.connection() as conn:
        user = await queries.user_by_email(conn, normalize_email(email))
    stored = user["password_hash"] if user is not None else None
    # No hash (unknown email, OAuth-only user): a dummy verify keeps the timing the same.
    matches = await verify_password(stored, password)
    if user is None or not matches:
        raise InvalidCredentials()
    if user["email_verified_at"] is None:
        raise EmailNotVerified()
    rehashed = await hash_password(password) if stored and needs_rehash(stored) else None
    async with services.db.transaction() as conn:
        if rehashed is not None:
            await queries.set_password(conn, user_id=user["id"], password_hash=rehashed)
        account_id = await queries.default_account_id(conn, user["id"])
        tokens = await issue_session(
            conn,
            settings,
            user_id=user["id"],
            account_id=account_id,
            user_agent=client.user_agent,
            ip=client.ip,
        )
    return SignedIn(tokens, {"user": user_json(user)})


async def request_password_reset(services: Services, *, email: str) -> str:
    """Queue a one-hour reset link for the address; same answer and work either way."""
    await _submit_mail(services, RESET, email)
    return RESET_MESSAGE


async def mail_reset_link(services: Services, email: str) -> None:
    """The job's half: a reset link when the address has a user."""
    settings = services.settings
    outgoing: mail.Outgoing | None = None
    async with services.db.transaction() as conn:
        user = await queries.lock_user_by_email(conn, normalize_email(email))
        if user is not None:
            token = await _new_user_token(
                conn, settings, user_id=user["id"], purpose=RESET, ttl=RESET_TTL
            )
            outgoing = mail.password_reset(
                user["email"],
                link=_link(settings, "/reset-password", token),
                ttl_minutes=int(RESET_TTL.total_seconds() // 60),
            )
    if outgoing is not None:
        await mail.deliver(services, outgoing)


async def confirm_password_reset(services: Services, *, token: str, password: str) -> None:
    """Single-use token: set the new password and end every session and token of the user."""
    settings = services.settings
    password_hash = await hash_password(password)  # before any lock is taken
    async with services.db.transaction() as conn:
        locked = await _lock_token(conn, settings, token=token, purpose=RESET)
        user_id = locked["user"]["id"]
        await queries.set_password(conn, user_id=user_id, password_hash=password_hash)
        # A pending verification link must not later overwrite the password chosen here.
        await queries.forget_token_passwords(conn, user_id=user_id)
        await revoke_all(conn, user_id=user_id)


async def refresh_session(
    services: Services, *, refresh_token: str, client: ClientMeta
) -> SignedIn:
    """Rotate the refresh session and answer with the user it belongs to."""
    async with services.db.connection() as conn:
        renewed = await rotate_fast(
            conn,
            services.settings,
            refresh_token=refresh_token,
            user_agent=client.user_agent,
            ip=client.ip,
        )
        if renewed is not None:
            tokens, user = renewed
            return SignedIn(tokens, {"user": user_json(user)})
        # Not renewable, or raced: the locked slow path says why (and revokes on reuse).
        tokens = await rotate(
            conn,
            services.settings,
            refresh_token=refresh_token,
            user_agent=client.user_agent,
            ip=client.ip,
        )
        row = await queries.user_by_id(conn, tokens.access.user_id)
    return SignedIn(tokens, {"user": user_json(row) if row else None})
