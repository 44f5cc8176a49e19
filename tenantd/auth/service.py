"""Sign-up, email verification, sign-in and passwords: the rules of these flows.

Lock order everywhere a user's email tokens change: the user row first, then token rows,
so concurrent sign-ups, resends, verifications and resets of one user serialise without
deadlocks.

Registration binding: a sign-up's password waits on its own verification link, never on the
user, and the browser that signed up holds a binding for it (a cookie the view sets). The link
installs that password only when that browser verifies or the request carries the password
itself; any other use verifies the address with no password set. So whoever signs up with an
address they do not own never knows a password of the account the mailbox owner lands in.
"""

from __future__ import annotations

import datetime as dt
import functools
import hmac
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import quote

from tenantd.accounts import mail as account_mail
from tenantd.accounts.errors import DomainClaimed
from tenantd.accounts.provisioning import DomainConflict, provision_personal_account
from tenantd.addresses import InvalidEmail, canonical_email, normalize_email
from tenantd.audit import security
from tenantd.auth import breach, captcha, mail
from tenantd.auth.domain import Auth
from tenantd.auth.errors import EmailNotVerified
from tenantd.auth.schemas import LoginBody, PasswordChangeBody, RegisterBody, VerifyEmailBody
from tenantd.db import Conn, Row
from tenantd.errors import NotFound, RateLimited, Unauthorized, ValidationFailed
from tenantd.identity import queries
from tenantd.identity.devices import describe
from tenantd.identity.errors import InvalidCredentials
from tenantd.identity.events import user_changed
from tenantd.identity.passwords import hash_password, verified_rehash, verify_password
from tenantd.identity.sessions import (
    IssuedTokens,
    issue_session,
    renew_batched,
    revoke_all,
    revoke_session,
    rotate,
)
from tenantd.identity.signin import (
    AUTH_EMAIL,
    EMAIL_LINK,
    PASSWORD,
    ClientMeta,
    Started,
    record_security,
    start_default_session,
    start_session,
)
from tenantd.identity.tokens import (
    AccessClaims,
    new_opaque_token,
    refresh_token_family,
    token_hash,
)
from tenantd.mfa import sensitive
from tenantd.mfa import service as mfa
from tenantd.ops.config import RateLimitSettings
from tenantd.ops.ratelimit import Verdict, enforce, hit
from tenantd.outbox import Actor
from tenantd.settings import Settings
from tenantd.suppression import service as suppression

if TYPE_CHECKING:
    from tenantd.bundle import Services
    from tenantd.principal import Principal
    from tenantd.web.ratelimit import RequestLimits

log = logging.getLogger(__name__)

VERIFY = "verify_email"
AMR_EMAIL = "email"  # a link or code mailed to the address: proves the mailbox, not a factor
RESET = "password_reset"
SESSION_REUSED = "session_reused"
VERIFY_TTL = dt.timedelta(hours=mail.VERIFY_TTL_HOURS)
RESET_TTL = dt.timedelta(hours=1)

REGISTER_MESSAGE = "Check your inbox: we sent a link to confirm the address."
RESEND_MESSAGE = "If the address belongs to an unverified sign-up, a new link is on its way."
RESET_MESSAGE = "If an account uses this address, a password reset link is on its way."


@dataclass(frozen=True)
class SignedIn:
    """A new session and the user it belongs to (cookies are the view's business)."""

    tokens: IssuedTokens
    user: Row | None  # None only when the user vanished during a refresh
    device: str | None = None  # a sign-in's device cookie value (the view sets it)
    warnings: tuple[str, ...] = ()  # a password change's PASSWORD_BREACH_CHECK=warn


@dataclass(frozen=True)
class MfaPending:
    """A correct password of a user with a second factor: no session yet, a ticket."""

    ticket: mfa.Ticket


@dataclass(frozen=True)
class Verified:
    """A verification's session, the account it lands in, and whether it used up this
    browser's registration binding."""

    tokens: IssuedTokens
    user: Row
    account: Row
    has_password_login: bool
    binding_used: bool = False
    device: str | None = None


@dataclass(frozen=True)
class VerifiedMfaPending:
    """A verification of a user who has a second factor: the address is verified, and a
    ticket (as a password sign-in's) instead of a session: the factor still has to come."""

    ticket: mfa.Ticket
    binding_used: bool = False


@dataclass(frozen=True)
class Registered:
    """The sign-up answer and the binding to hand this browser (whatever the address)."""

    message: str
    binding: str
    warnings: tuple[str, ...] = ()  # PASSWORD_BREACH_CHECK=warn: ("password_breached",)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _link(settings: Settings, path: str, token: str) -> str:
    return f"{settings.public_base_url.rstrip('/')}{path}?token={quote(token)}"


def bad_token() -> ValidationFailed:
    # Unknown, expired and already used look the same: nothing to learn from probing.
    return ValidationFailed({"token": "This link is invalid, expired or already used"})


async def _new_user_token(
    conn: Conn, settings: Settings, *, user_id: uuid.UUID, purpose: str, ttl: dt.timedelta
) -> str:
    """Rotate: older tokens of this purpose stop working; only the hash of the new one is kept."""
    await queries.delete_user_tokens(conn, user_id=user_id, purpose=purpose)
    return await _insert_link(conn, settings, user_id=user_id, purpose=purpose, ttl=ttl)


async def _insert_link(
    conn: Conn,
    settings: Settings,
    *,
    user_id: uuid.UUID,
    purpose: str,
    ttl: dt.timedelta,
    password_hash: str | None = None,
    binding_hash: bytes | None = None,
    names: tuple[str, str] | None = None,
) -> str:
    """A new single-use link token; the database keeps only its keyed hash."""
    token = new_opaque_token()
    await queries.insert_user_token(
        conn,
        token_hash=token_hash(settings.secret_key, token),
        user_id=user_id,
        purpose=purpose,
        expires_at=_now() + ttl,
        password_hash=password_hash,
        binding_hash=binding_hash,
        first_name=names[0] if names else None,
        last_name=names[1] if names else None,
    )
    return token


async def _verification(
    conn: Conn,
    settings: Settings,
    user: Row,
    *,
    password_hash: str | None,
    binding_hash: bytes | None,
    names: tuple[str, str] | None,
    first_name: str,
) -> mail.Outgoing:
    """The mail of one more link carrying one sign-up's pending credential and names; earlier
    links keep working (until one of them verifies the address)."""
    token = await _insert_link(
        conn,
        settings,
        user_id=user["id"],
        purpose=VERIFY,
        ttl=VERIFY_TTL,
        password_hash=password_hash,
        binding_hash=binding_hash,
        names=names,
    )
    return mail.verification(
        user["email"],
        settings=settings,
        link=_link(settings, "/verify-email", token),
        first_name=first_name,
        locale=user.get("locale"),
    )


async def register(
    services: Services, body: RegisterBody, *, locale: str | None = None, ip: str | None = None
) -> Registered:
    """Mail a link that carries this sign-up's own password; same answer for a known email.
    Bot check and breached-password check first (when configured)."""
    settings = services.settings
    email, password = body.email, body.password
    first_name, last_name = body.first_name, body.last_name
    await captcha.require(services, token=body.captcha_token, ip=ip)
    warnings = await breach.check_password(services, password)
    # Hash first, whatever the outcome, so timing does not tell whether the address exists.
    password_hash = await hash_password(password)
    # Every answer hands out a binding, known address or not, so the cookie tells nothing.
    binding = new_opaque_token()
    try:
        email = canonical_email(email)
    except InvalidEmail as error:
        raise ValidationFailed({"email": error.reason}) from None
    names = (first_name.strip(), last_name.strip())
    outgoing: mail.Outgoing
    async with services.db.transaction() as conn:
        user_id = await queries.insert_user(
            conn, email=email, first_name=names[0], last_name=names[1], locale=locale
        )
        if user_id is not None:
            await user_changed(conn, "user.created", user_id)
        # The new row, or the one the insert conflicted on.
        user = await (
            queries.lock_user(conn, user_id)
            if user_id is not None
            else queries.lock_user_by_email(conn, email)
        )
        assert user is not None
        if user["email_verified_at"] is not None:
            outgoing = mail.account_exists(user["email"], settings=settings)
        else:
            # Nothing goes onto the user: the password waits on this sign-up's own link.
            outgoing = await _verification(
                conn,
                settings,
                user,
                password_hash=password_hash,
                binding_hash=token_hash(settings.secret_key, binding),
                names=names,
                first_name=names[0],  # this sign-up's, never an earlier one's
            )
    await mail.deliver(services, outgoing)
    return Registered(REGISTER_MESSAGE, binding, warnings)


async def resend_verification(services: Services, *, email: str) -> str:
    """Queue a fresh verification link for the address; same answer and work either way.

    The lookup and the mail run in a job (`auth.email`), so neither the answer nor its
    timing (a slow email provider) tells whether the address has an unverified sign-up.
    """
    await _submit_mail(services, VERIFY, email)
    return RESEND_MESSAGE


async def mail_verification_link(services: Services, email: str) -> None:
    """The job's half: one more link for an unverified user; earlier links keep working.

    The new link carries the newest sign-up's pending credential, so it still installs that
    password in that sign-up's browser (and nowhere else), as the original link would.
    """
    settings = services.settings
    outgoing: mail.Outgoing | None = None
    async with services.db.transaction() as conn:
        user = await queries.lock_user_by_email(conn, normalize_email(email))
        if user is not None and user["email_verified_at"] is None:
            pending = await queries.latest_registration(conn, user_id=user["id"])
            names = _names_of(pending)
            outgoing = await _verification(
                conn,
                settings,
                user,
                password_hash=pending["password_hash"] if pending else None,
                binding_hash=pending["binding_hash"] if pending else None,
                names=names,
                first_name=names[0] if names else user["first_name"],
            )
    if outgoing is not None:
        await mail.deliver_from_job(services, outgoing)


def _names_of(link: Row | None) -> tuple[str, str] | None:
    """The names a verification link carries (None: a link without a sign-up's names)."""
    if link is None or link["first_name"] is None:
        return None
    return (link["first_name"], link["last_name"] or "")


async def _submit_mail(services: Services, purpose: str, email: str) -> None:
    try:
        address = canonical_email(email)  # one mailbox, whatever the entry point
    except InvalidEmail as error:
        raise ValidationFailed({"email": error.reason}) from None
    await services.jobs.enqueue(services.db, AUTH_EMAIL, {"purpose": purpose, "email": address})


def _usable(row: Row | None) -> bool:
    return row is not None and row["used_at"] is None and row["expires_at"] > _now()


async def _lock_token(conn: Conn, settings: Settings, *, token: str, purpose: str) -> Row:
    """Lock the token's user, then the token; refuse unknown, expired or used tokens.

    The caller retires what the use consumes (with this transaction).
    """
    digest = token_hash(settings.secret_key, token)
    user_id = await queries.token_owner(conn, token_hash=digest, purpose=purpose)
    if user_id is None:
        raise bad_token()
    user = await queries.lock_user(conn, user_id)
    row = await queries.lock_user_token(conn, token_hash=digest, purpose=purpose)
    if user is None or not _usable(row):
        raise bad_token()
    return {"user": user, "token": row}


def _same_browser(settings: Settings, binding_hash: bytes | None, binding: str | None) -> bool:
    """Whether the request carries the binding cookie of the sign-up that made the link."""
    if binding_hash is None or not binding:
        return False
    return hmac.compare_digest(bytes(binding_hash), token_hash(settings.secret_key, binding))


async def _proven_password(services: Services, *, token: str, password: str) -> str:
    """The link's pending password hash when `password` is that password; refuse otherwise.

    Checked before any lock is taken (argon2 is slow); the caller installs the hash only if
    the locked link still carries it.
    """
    digest = token_hash(services.settings.secret_key, token)
    async with services.db.connection() as conn:
        row = await queries.user_token(conn, token_hash=digest, purpose=VERIFY)
    if row is None or not _usable(row):
        raise bad_token()
    # No pending password (a dummy verify keeps the timing): nothing can match.
    if not await verify_password(row["password_hash"], password):
        raise ValidationFailed({"password": "This is not the password chosen at sign-up"})
    stored: str = row["password_hash"]
    return stored


async def verify_email(
    services: Auth,
    body: VerifyEmailBody,
    *,
    client: ClientMeta,
    binding: str | None = None,
) -> Verified | VerifiedMfaPending:
    """Verify the address, provision the personal account and sign in, in one transaction.

    Verifying ends every outstanding verification link of the user, and a user who has a
    second factor gets a ticket (`mfaRequired`) instead of a session, as a password sign-in.

    The link installs its own sign-up's password only in that sign-up's browser (`binding`)
    or with that `password`; otherwise the address is verified with no password set by the
    link. A wrong `password` is refused (422) and leaves the link usable. Until one link
    verifies the address, links of other sign-ups keep working; the names of the sign-up
    whose link is used become the user's.

    On a claimed domain the join request and its mail jobs (owner notice, requester notice)
    are committed first, then DOMAIN_CLAIMED is raised.
    """
    token, password = body.token, body.password
    settings = services.settings
    proven = await _proven_password(services, token=token, password=password) if password else None
    conflict: DomainConflict | None = None
    ticket: mfa.Ticket | None = None
    async with services.db.transaction() as conn:
        locked = await _lock_token(conn, settings, token=token, purpose=VERIFY)
        user_id: uuid.UUID = locked["user"]["id"]
        link = locked["token"]
        # Verifying ends every outstanding link of the address (other sign-ups' included): a
        # leftover link must not sign in later, past a factor added meanwhile.
        await queries.delete_user_tokens(conn, user_id=user_id, purpose=VERIFY)
        names = _names_of(link)
        if names is not None:  # the sign-up whose link was used names the user
            await queries.set_names(conn, user_id=user_id, first_name=names[0], last_name=names[1])
        same_browser = _same_browser(settings, link["binding_hash"], binding)
        pending = link["password_hash"]
        if pending is not None and (same_browser or proven == pending):
            await queries.set_password(conn, user_id=user_id, password_hash=pending)
            await record_security(
                conn,
                client,
                user_id=user_id,
                kind=security.PASSWORD_SET,
                data={"via": "sign_up"},
            )
        was_verified = locked["user"]["email_verified_at"] is not None
        user = await queries.mark_email_verified(conn, user_id)
        if not was_verified:
            await user_changed(
                conn, "user.email_verified", user_id, previous={"emailVerified": False}
            )
        await suppression.remove(conn, user["email"], actor=Actor.user(user_id))
        outcome = await provision_personal_account(conn, settings, user_id=user_id)
        if outcome.conflict is not None:
            conflict = outcome.conflict
            # The owner and the requester are mailed after commit, with the join request.
            await account_mail.submit_join_request(
                services, conn, join_request_id=conflict.join_request_id
            )
        elif user["mfa_enabled"]:
            # A link proves the mailbox, not a factor: a user with one finishes with it.
            ticket = await mfa.start_ticket(conn, settings, user_id=user_id, amr=[AMR_EMAIL])
        else:
            assert outcome.account_id is not None
            account = await queries.account_ref(conn, outcome.account_id)
            has_password_login = await queries.has_password(conn, user_id)
            started = await start_session(
                services.identity,
                conn,
                user_id=user_id,
                account_id=outcome.account_id,
                client=client,
                method=EMAIL_LINK,
                amr=(AMR_EMAIL,),  # the link proved the mailbox
            )
    if conflict is not None:
        # Committed above: the join request and its mail jobs survive the refusal.
        raise DomainClaimed(
            details={"accountId": str(conflict.account_id), "domain": conflict.domain}
        )
    if ticket is not None:
        return VerifiedMfaPending(ticket, binding_used=same_browser)
    assert account is not None  # provisioned in this transaction
    return Verified(
        started.tokens,
        user,
        account,
        has_password_login,
        binding_used=same_browser,
        device=started.device,
    )


async def login(services: Auth, body: LoginBody, *, client: ClientMeta) -> SignedIn | MfaPending:
    """Password sign-in; unknown email and wrong password are indistinguishable. A user with
    a second factor gets a ticket for POST /api/v1/auth/mfa/verify instead of a session.
    After repeated failures for the address or the client a bot check is required first."""
    settings = services.settings
    email, password, captcha_token = body.email, body.password, body.captcha_token
    async with services.db.connection() as conn:
        check = await captcha.login_needs_check(conn, settings, email=email, ip=client.ip)
        user = await queries.user_by_email(conn, normalize_email(email))
    if check:  # asked with no pool connection held
        await captcha.require(services, token=captcha_token, ip=client.ip)
    stored = user["password_hash"] if user is not None else None
    if user is not None and stored is None and user["email_verified_at"] is None:
        # A sign-up not verified yet: its own password earns "verify first", never a session.
        stored = user["pending_password_hash"]
    # No hash (unknown email, OAuth-only user): a dummy verify keeps the timing the same.
    # An imported or outdated hash that matches comes back rehashed to argon2id.
    matches, rehashed = await verified_rehash(stored, password)
    if user is None or not matches:
        async with services.db.connection() as conn:
            await captcha.count_login_failure(conn, settings, email=email, ip=client.ip)
        raise InvalidCredentials()
    if user["email_verified_at"] is None:
        raise EmailNotVerified()
    async with services.db.transaction() as conn:
        if rehashed is not None and stored is not None:
            await queries.replace_password_hash(conn, user_id=user["id"], old=stored, new=rehashed)
        if user["mfa_enabled"]:
            ticket = await mfa.start_ticket(
                conn, settings, user_id=user["id"], amr=[mfa.AMR_PASSWORD]
            )
            return MfaPending(ticket)
        started = await start_default_session(
            services.identity,
            conn,
            user_id=user["id"],
            client=client,
            method=PASSWORD,
            amr=(mfa.AMR_PASSWORD,),
        )
    return SignedIn(started.tokens, user, device=started.device)


async def ticket_or_session(
    services: Auth,
    conn: Conn,
    *,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    client: ClientMeta,
    method: str,
    amr: str,
    return_to: str | None = None,
) -> mfa.Ticket | Started:
    """The first factor (`amr`) is proven: a user with a second factor gets a ticket for
    POST /api/v1/auth/mfa/verify (and `return_to` after it), anyone else a session."""
    if await mfa.mfa_enabled(conn, user_id):
        return await mfa.start_ticket(
            conn, services.settings, user_id=user_id, amr=[amr], return_to=return_to
        )
    return await start_session(
        services.identity,
        conn,
        user_id=user_id,
        account_id=account_id,
        client=client,
        method=method,
        amr=(amr,),
    )


async def request_password_reset(
    services: Services, *, email: str, captcha_token: str | None = None, ip: str | None = None
) -> str:
    """Queue a one-hour reset link for the address; same answer and work either way (after
    the bot check, when configured)."""
    await captcha.require(services, token=captcha_token, ip=ip)
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
                settings=settings,
                link=_link(settings, "/reset-password", token),
                ttl_minutes=int(RESET_TTL.total_seconds() // 60),
                locale=user.get("locale"),
            )
    if outgoing is not None:
        await mail.deliver_from_job(services, outgoing)


async def confirm_password_reset(
    services: Services, *, token: str, password: str, client: ClientMeta | None = None
) -> tuple[str, ...]:
    """Single-use token: set the new password and end every session and token of the user.
    Answers the breached-password warnings (PASSWORD_BREACH_CHECK=warn)."""
    settings = services.settings
    warnings = await breach.check_password(services, password)
    password_hash = await hash_password(password)  # before any lock is taken
    async with services.db.transaction() as conn:
        locked = await _lock_token(conn, settings, token=token, purpose=RESET)
        user_id = locked["user"]["id"]
        # Single use: this link and every other reset link of the user end here.
        await queries.delete_user_tokens(conn, user_id=user_id, purpose=RESET)
        await queries.set_password(conn, user_id=user_id, password_hash=password_hash)
        # A pending verification link must not later overwrite the password chosen here.
        await queries.forget_token_passwords(conn, user_id=user_id)
        await _end_every_session(conn, client, user_id=user_id, kind=security.PASSWORD_RESET)
    return warnings


async def _end_every_session(
    conn: Conn, client: ClientMeta | None, *, user_id: uuid.UUID, kind: str
) -> None:
    """Every session and access token of the user ends (the user-wide cutoff), logged as
    `kind` in the user's security log."""
    await revoke_all(conn, user_id=user_id)
    await record_security(conn, client, user_id=user_id, kind=kind)


async def change_password(
    services: Auth,
    principal: Principal,
    body: PasswordChangeBody,
    *,
    client: ClientMeta,
) -> SignedIn:
    """Set a password, or change it given the current one; every other session ends.

    Step-up: the caller's authentication must be recent (REAUTH_REQUIRED otherwise); the new
    session keeps the caller's amr and auth_time.

    The user-wide cutoff ends the other sessions and access tokens; the caller gets a new
    session issued after it, so this browser stays signed in. Attempts count against the
    login limit of the address, so the route is no faster a password oracle than login; a
    browser that signed in as the user before counts in its own budget, as at login.
    """
    settings = services.settings
    current_password, new_password = body.current_password, body.new_password
    user_id, account_id = principal.user_id, principal.account_id
    await sensitive.require(services, principal, sensitive.PASSWORD_CHANGED)
    async with services.db.connection() as conn:
        user = await queries.user_credentials(conn, user_id)
        if user is None:
            raise Unauthorized("invalid_session", "Session is invalid or expired")
        stored = user["password_hash"]
        if stored is not None:
            if not current_password:
                raise ValidationFailed({"currentPassword": "Enter the current password"})
            await enforce(
                conn,
                settings.section(RateLimitSettings),
                secret_key=settings.secret_key,
                scope="login",
                ip=None,  # the route counts the address per IP
                email=user["email"],
                device_cookie=client.device,
            )
    if stored is not None and not await verify_password(stored, current_password or ""):
        raise InvalidCredentials("Current password is incorrect")
    warnings = await breach.check_password(services, new_password)
    password_hash = await hash_password(new_password)  # before any lock is taken
    async with services.db.transaction() as conn:
        await queries.lock_user(conn, user_id)
        if await queries.password_hash(conn, user_id) != stored:
            # Set or changed since it was checked (a concurrent change or reset).
            raise InvalidCredentials("Current password is incorrect")
        await queries.set_password(conn, user_id=user_id, password_hash=password_hash)
        if stored is None:
            await user_changed(conn, "user.updated", user_id, previous={"hasPasswordLogin": False})
        # A pending verification link must not later overwrite the password chosen here.
        await queries.forget_token_passwords(conn, user_id=user_id)
        await revoke_all(conn, user_id=user_id)
        await queries.set_cutoff_to_the_millisecond(conn, user_id=user_id)
        # This browser's session continues as a new family (the cutoff ended the old one).
        tokens = await issue_session(
            conn,
            settings,
            keyring=services.identity.keyring,
            user_id=user_id,
            account_id=account_id,
            client=client,
            amr=principal.amr or (mfa.AMR_PASSWORD,),
            auth_time=principal.auth_time,
            method=PASSWORD,
        )
        await record_security(
            conn,
            client,
            user_id=user_id,
            kind=security.PASSWORD_CHANGED if stored is not None else security.PASSWORD_SET,
            session_id=tokens.access.session_id,
        )
        # The notice and its "This wasn't me" link (which removes the password).
        await sensitive.performed(
            services,
            conn,
            actor=principal,
            action=sensitive.PASSWORD_CHANGED,
            undo={"set": stored is None},
            event=False,  # password_changed or password_set, just above
        )
        row = await queries.user_by_id(conn, user_id)
    assert row is not None
    return SignedIn(tokens, row, warnings=warnings)


async def refresh(
    services: Auth,
    *,
    refresh_token: str | None,
    principal: Principal | None,
    client: ClientMeta,
    limits: RequestLimits | None = None,
) -> SignedIn | None:
    """POST /api/v1/auth/refresh: rotate the session of the refresh cookie; None without one
    (the anonymous answer of tryAuth). An operator's impersonation has one access token and
    nothing to renew it with."""
    if not refresh_token:
        if principal is not None and principal.act is not None:
            raise Unauthorized("impersonation", "An impersonation session cannot be refreshed")
        return None
    return await refresh_session(
        services, refresh_token=refresh_token, client=client, limits=limits
    )


async def refresh_session(
    services: Auth,
    *,
    refresh_token: str,
    client: ClientMeta,
    limits: RequestLimits | None = None,
) -> SignedIn:
    """Rotate the refresh session and answer with the user it belongs to.

    Reuse of a rotated-out token ends the family; its user is told by email (after commit).
    `limits`: the request's rate limits, per IP and per the session family the token names
    (checked by its tag), counted once, in the renewal's own statement; their 429 when over.
    """
    family_id = refresh_token_family(services.settings.secret_key, refresh_token)
    counters = limits.counters(session=str(family_id) if family_id else None) if limits else ()
    fast = await renew_batched(
        services.identity.rotation,
        services.settings,
        keyring=services.identity.keyring,
        refresh_token=refresh_token,
        client=client,
        family_id=family_id,
        counters=counters,
    )
    if fast.verdict is not None:
        raise _over_limit(limits, fast.verdict)
    if fast.renewed is not None:
        tokens, user = fast.renewed
        return SignedIn(tokens, user)
    async with services.db.connection() as conn:
        if counters and not fast.counted:
            verdict = await hit(conn, counters)
            if not verdict.allowed:
                raise _over_limit(limits, verdict)
        # Not renewable, raced, or a repeat: the locked slow path decides (and revokes on reuse).
        async with conn.transaction():
            renewal = await rotate(
                conn,
                services.settings,
                keyring=services.identity.keyring,
                refresh_token=refresh_token,
                client=client,
            )
            if renewal.revoked_user_id is not None:
                await _submit_reuse_notice(services, conn, renewal.revoked_user_id)
                await record_security(
                    conn,
                    client,
                    user_id=renewal.revoked_user_id,
                    kind=security.SESSION_REUSE_DETECTED,
                    session_id=renewal.family_id,
                )
        tokens = renewal.issued()
        row = await queries.user_by_id(conn, tokens.access.user_id)
    return SignedIn(tokens, row)


def _over_limit(limits: RequestLimits | None, verdict: Verdict) -> RateLimited:
    """The 429 of a verdict: only counters the caller handed in (`limits`) can give one."""
    assert limits is not None
    return limits.refused(verdict)


async def _submit_reuse_notice(services: Services, conn: Conn, user_id: uuid.UUID) -> None:
    """Queue the "session ended" mail in the revoking transaction: it leaves after commit."""
    user = await queries.user_by_id(conn, user_id)
    if user is not None:
        await services.jobs.enqueue(
            conn, AUTH_EMAIL, {"purpose": SESSION_REUSED, "email": normalize_email(user["email"])}
        )


async def mail_session_reused(services: Services, email: str) -> None:
    """The job's half: tell the user a session was ended because its token was reused."""
    await mail.deliver_from_job(services, mail.session_reused(email, settings=services.settings))


async def logout(
    services: Services,
    *,
    refresh_token: str | None,
    access: AccessClaims | None,
    client: ClientMeta | None = None,
) -> None:
    """End this session family, and with it every access token issued to it."""
    client = client or ClientMeta()
    async with services.db.transaction() as conn:
        await revoke_session(conn, services.settings, refresh_token=refresh_token, access=access)
        if access is not None:
            await record_security(
                conn,
                client,
                user_id=access.user_id,
                kind=security.SIGNED_OUT,
                session_id=access.session_id,
            )


async def logout_all(
    services: Services, *, user_id: uuid.UUID, client: ClientMeta | None = None
) -> None:
    """End every session and access token of the user (the user-wide cutoff)."""
    client = client or ClientMeta()
    async with services.db.transaction() as conn:
        await _end_every_session(conn, client, user_id=user_id, kind=security.SIGNED_OUT_EVERYWHERE)


# -- sessions the user can see and end --------------------------------------------------------


async def list_sessions(
    services: Services, *, user_id: uuid.UUID, current: uuid.UUID | None
) -> list[Row]:
    """The caller's live sessions (one per refresh family), the most recently used first.

    Read from a replica when there are any; one that does not list the current session yet
    (a sign-in it has not replayed) is not trusted: the primary answers."""
    rows = await services.db.read(
        functools.partial(queries.live_sessions, user_id=user_id), caller=user_id
    )
    if current is not None and all(row["id"] != current for row in rows) and services.db.replicas:
        async with services.db.connection() as conn:
            rows = await queries.live_sessions(conn, user_id)
    return rows


async def end_session(
    services: Services, *, user_id: uuid.UUID, session_id: uuid.UUID, client: ClientMeta
) -> None:
    """End one of the caller's live sessions: its refresh token and every access token issued
    to it (`sid`) stop working at once on every instance; its SSE streams end. 404 when it is
    not a live session of the caller's (another user's id included)."""
    async with services.db.transaction() as conn:
        if not await queries.revoke_user_family(conn, user_id=user_id, family_id=session_id):
            raise NotFound("No live session of yours has this id")
        await record_security(
            conn,
            client,
            user_id=user_id,
            kind=security.SESSION_REVOKED,
            session_id=session_id,
        )


async def end_other_sessions(
    services: Services, *, user_id: uuid.UUID, current: uuid.UUID | None, client: ClientMeta
) -> int:
    """End every session of the caller but this one; how many live sessions ended."""
    async with services.db.transaction() as conn:
        count = await queries.revoke_other_families(conn, user_id=user_id, keep=current)
        await record_security(
            conn,
            client,
            user_id=user_id,
            kind=security.OTHER_SESSIONS_REVOKED,
            session_id=current,
            data={"count": count},
        )
    return count


async def security_events(
    services: Services, *, user_id: uuid.UUID, before_id: int | None, limit: int
) -> tuple[list[Row], int | None]:
    """The user's security log, newest first: the rows and the id the next page starts before."""
    async with services.db.connection() as conn:
        return await security.page(conn, user_id=user_id, before_id=before_id, limit=limit)


async def mail_new_signin(services: Services, session_id: str) -> None:
    """The job's half: tell the user about a sign-in from a new browser (skipped when the
    session is gone: a rolled-back sign-in)."""
    async with services.db.connection() as conn:
        row = await queries.session_sign_in(conn, uuid.UUID(session_id))
    if row is None:
        return
    agent = describe(row["user_agent"])
    device = " on ".join(part for part in (agent.browser, agent.os) if part) or "Unknown browser"
    message = mail.new_signin(
        row["email"],
        settings=services.settings,
        device=device,
        ip=row["ip"] or "unknown",
        time=row["signed_in_at"].astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        method=row["method"] or "unknown",
    )
    await mail.deliver(services, message)
