"""The rules of multi-factor authentication: TOTP enrolment and use (once per code, locked
after 5 wrong codes in 15 minutes), recovery codes, sign-in tickets, reauthentication.

Factors: a confirmed TOTP secret and passkeys. `users.mfa_enabled` says whether a user has
at least one; it is recomputed under the user row lock whenever a factor comes or goes.
"""

from __future__ import annotations

import datetime as dt
import hmac
import logging
import math
import secrets
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from tenantd import crypto
from tenantd.db import Conn, Row
from tenantd.errors import Conflict, NotFound, RateLimited, Unauthorized
from tenantd.identity import queries as identity_queries
from tenantd.identity.domain import Identity
from tenantd.identity.errors import InvalidCredentials, UserDisabled
from tenantd.identity.passwords import verified_rehash
from tenantd.identity.sessions import ClientMeta, IssuedTokens
from tenantd.identity.settings import IdentitySettings
from tenantd.identity.signin import PASSWORD, start_default_session
from tenantd.identity.sso_policy import refuse_unless_sso
from tenantd.identity.tokens import AccessClaims, issue_access_token, new_opaque_token, token_hash
from tenantd.mfa import mail, queries, sensitive, totp
from tenantd.mfa.errors import Impersonation
from tenantd.ops.config import RateLimitSettings
from tenantd.ops.ratelimit import enforce
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.mfa.domain import Mfa
    from tenantd.principal import Principal

log = logging.getLogger(__name__)

RECOVERY_CODE_COUNT = 10
RECOVERY_ALPHABET = "abcdefghjkmnpqrstuvwxyz23456789"  # no 0/o, 1/l/i
LOCK_LIMIT = 5  # wrong codes ...
LOCK_WINDOW_SECONDS = 15 * 60  # ... inside this window ...
LOCK_SECONDS = 15 * 60  # ... lock the codes for this long
TICKET_TTL_SECONDS = 5 * 60
BINDING_COOKIE = "mfa_binding"

# RFC 8176 authentication method references carried in `amr`.
AMR_PASSWORD = "pwd"
AMR_OTP = "otp"  # a TOTP code or a recovery code (a one-time password either way)
AMR_PASSKEY = "hwk"
AMR_FEDERATED = "fed"  # an OpenID Connect provider vouched for the user


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# -- status -----------------------------------------------------------------------------------


def methods_of(summary: Row | None) -> list[str]:
    """Second factors a user can answer with: totp, passkey, recoveryCode."""
    if summary is None:
        return []
    methods = []
    if summary["totp"]:
        methods.append("totp")
    if summary["passkeys"]:
        methods.append("passkey")
    if summary["recovery_codes"]:
        methods.append("recoveryCode")
    return methods


async def status(services: Mfa, user_id: uuid.UUID) -> dict[str, Any]:
    """{enabled, methods, recoveryCodesRemaining} of a signed-in user."""
    async with services.db.connection() as conn:
        summary = await identity_queries.factor_summary(conn, user_id)
    if summary is None:
        raise Unauthorized("invalid_session", "Session is invalid or expired")
    return {
        "enabled": bool(summary["mfa_enabled"]),
        "methods": methods_of(summary),
        "recoveryCodesRemaining": int(summary["recovery_codes"]) if summary["mfa_enabled"] else 0,
    }


async def mfa_enabled(conn: Conn, user_id: uuid.UUID) -> bool:
    """Whether the user has a second factor (its sign-ins go through a ticket)."""
    return await queries.user_mfa_enabled(conn, user_id)


# -- TOTP enrolment ---------------------------------------------------------------------------


def _seal(settings: Settings, user_id: uuid.UUID, secret: str) -> bytes:
    return crypto.seal(
        settings.secret_key, totp.TOTP_SECRET_INFO, secret.encode(), associated=user_id.bytes
    )


def _unseal(settings: Settings, user_id: uuid.UUID, blob: bytes) -> str:
    return crypto.unseal(
        settings.secret_key, totp.TOTP_SECRET_INFO, blob, associated=user_id.bytes
    ).decode()


@dataclass(frozen=True)
class TotpSetup:
    secret: str
    otpauth_uri: str
    qr_svg: str


async def setup_totp(services: Mfa, actor: Principal) -> TotpSetup:
    """A new secret, pending until a code from it is confirmed (replaces a pending one).
    Adding a factor is sensitive: step-up here and at confirmation."""
    await sensitive.require(services, actor, sensitive.TOTP_ADDED)
    user_id = actor.user_id
    secret = totp.new_secret()
    async with services.db.transaction() as conn:
        user = await queries.lock_user(conn, user_id)
        if user is None:
            raise Unauthorized("invalid_session", "Session is invalid or expired")
        current = await queries.totp(conn, user_id)
        if current is not None and current["confirmed_at"] is not None:
            raise Conflict("An authenticator app is already set up; remove it first")
        await queries.put_pending_totp(
            conn, user_id=user_id, secret=_seal(services.settings, user_id, secret)
        )
    uri = totp.provisioning_uri(
        secret,
        account=user["email"],
        issuer=services.settings.section(IdentitySettings).webauthn_rp_name,
    )
    return TotpSetup(secret=secret, otpauth_uri=uri, qr_svg=totp.qr_svg(uri))


async def confirm_totp(services: Mfa, actor: Principal, *, code: str) -> list[str]:
    """Enable the pending secret with a current code from it (step-up; the user is told,
    with a link that removes it); the recovery codes come with the first factor (an empty
    list when the user already has codes)."""
    await sensitive.require(services, actor, sensitive.TOTP_ADDED)
    user_id = actor.user_id
    async with services.db.transaction() as conn:
        await queries.lock_user(conn, user_id)
        row = await queries.totp(conn, user_id)
        if row is None:
            raise NotFound("Start with POST /api/v1/auth/mfa/totp/setup")
        if row["confirmed_at"] is not None:
            raise Conflict("The authenticator app is already confirmed")
        await _refuse_if_locked(conn, user_id)
        step = totp.matching_step(
            _unseal(services.settings, user_id, row["secret_encrypted"]), code
        )
        if step is not None:
            await queries.confirm_totp(conn, user_id=user_id, step=step)
            await queries.clear_failures(conn, user_id)
            return await factor_added(
                services,
                conn,
                actor,
                sensitive.TOTP_ADDED,
                undo={"createdAt": row["created_at"].isoformat()},
            )
        locked = await _count_wrong(conn, user_id)
    _refuse_wrong(locked)


async def disable_totp(services: Mfa, principal: Principal) -> None:
    """Remove the authenticator app (step-up; the user is told, with a link that puts it
    back); the last factor takes the recovery codes."""
    await sensitive.require(services, principal, sensitive.TOTP_REMOVED)
    await remove_factor(
        services,
        principal,
        sensitive.TOTP_REMOVED,
        lambda conn: _take_confirmed_totp(conn, principal.user_id),
        missing="No authenticator app is set up",
        undo=lambda row: {
            "secret": bytes(row["secret_encrypted"]).hex(),
            "lastUsedStep": row["last_used_step"],
        },
    )


async def _take_confirmed_totp(conn: Conn, user_id: uuid.UUID) -> Row | None:
    """Delete the confirmed authenticator app; its row (None when there is none)."""
    row = await queries.totp(conn, user_id)
    if row is None or row["confirmed_at"] is None:
        return None
    await queries.delete_totp(conn, user_id)
    return row


async def factor_added(
    services: Mfa,
    conn: Conn,
    actor: Principal,
    action: sensitive.Sensitive,
    *,
    undo: dict[str, Any],
    data: dict[str, Any] | None = None,
) -> list[str]:
    """In the transaction that stored a factor of the caller's (under the user's lock):
    mfa_enabled is recomputed and the sensitive `action` (guarded by the caller) recorded;
    the recovery codes when it is the first factor (an empty list otherwise)."""
    codes = await _first_factor_codes(conn, services.settings, actor.user_id)
    await identity_queries.sync_mfa_enabled(conn, actor.user_id)
    await sensitive.performed(services, conn, actor=actor, action=action, undo=undo, data=data)
    return codes


async def remove_factor(
    services: Mfa,
    principal: Principal,
    action: sensitive.Sensitive,
    take: Callable[[Conn], Awaitable[Row | None]],
    *,
    missing: str,
    undo: Callable[[Row], dict[str, Any]],
    data: Callable[[Row], dict[str, Any]] | None = None,
) -> None:
    """Under the user's lock, `take` deletes one factor of the caller's and answers its row
    (None: 404 `missing`); the last factor takes the recovery codes, and the sensitive
    `action` (guarded by the caller) is recorded with the undo and data of the row."""
    async with services.db.transaction() as conn:
        await queries.lock_user(conn, principal.user_id)
        row = await take(conn)
        if row is None:
            raise NotFound(missing)
        await after_factor_removed(conn, principal.user_id)
        await sensitive.performed(
            services,
            conn,
            actor=principal,
            action=action,
            undo=undo(row),
            data=None if data is None else data(row),
        )


async def after_factor_removed(conn: Conn, user_id: uuid.UUID) -> None:
    """Recompute mfa_enabled; with no factor left the recovery codes go too."""
    if not await identity_queries.sync_mfa_enabled(conn, user_id):
        await queries.delete_recovery_codes(conn, user_id)


# -- recovery codes ---------------------------------------------------------------------------


def new_recovery_code() -> str:
    raw = "".join(secrets.choice(RECOVERY_ALPHABET) for _ in range(10))
    return f"{raw[:5]}-{raw[5:]}"


def normalize_recovery_code(code: str) -> str:
    return "".join(ch for ch in code.lower() if ch.isalnum())


def recovery_code_hash(secret_key: str, user_id: uuid.UUID, code: str) -> bytes:
    return token_hash(secret_key, f"mfa-recovery:{user_id}:{normalize_recovery_code(code)}")


async def _new_codes(conn: Conn, settings: Settings, user_id: uuid.UUID) -> list[str]:
    codes = [new_recovery_code() for _ in range(RECOVERY_CODE_COUNT)]
    await queries.replace_recovery_codes(
        conn,
        user_id=user_id,
        hashes=[recovery_code_hash(settings.secret_key, user_id, c) for c in codes],
    )
    return codes


async def _first_factor_codes(conn: Conn, settings: Settings, user_id: uuid.UUID) -> list[str]:
    summary = await identity_queries.factor_summary(conn, user_id)
    if summary is not None and summary["mfa_enabled"] and summary["recovery_codes"]:
        return []  # not the first factor: the codes the user holds stay good
    return await _new_codes(conn, settings, user_id)


async def regenerate_recovery_codes(services: Mfa, principal: Principal) -> list[str]:
    """Ten new codes; the old ones stop working (step-up, MFA on; the user is told, with a
    link that ends the new codes and brings the old ones back)."""
    await sensitive.require(services, principal, sensitive.RECOVERY_CODES_REGENERATED)
    async with services.db.transaction() as conn:
        user = await queries.lock_user(conn, principal.user_id)
        if user is None or not user["mfa_enabled"]:
            raise Conflict("Set up a second factor first")
        previous = await queries.unused_recovery_hashes(conn, principal.user_id)
        codes = await _new_codes(conn, services.settings, principal.user_id)
        await sensitive.performed(
            services,
            conn,
            actor=principal,
            action=sensitive.RECOVERY_CODES_REGENERATED,
            undo={"previous": [h.hex() for h in previous]},
        )
        return codes


# -- checking a code (sign-in ticket, reauthentication) ---------------------------------------


def _locked(until: dt.datetime) -> RateLimited:
    return RateLimited(max(1, math.ceil((until - _now()).total_seconds())))


async def _refuse_if_locked(conn: Conn, user_id: uuid.UUID) -> None:
    """In the transaction that checks a code: lock the user's wrong-code row, refuse when the
    codes are locked. Checks of one user run one at a time from here to their commit, so the
    count a check reads includes every check before it (at most LOCK_LIMIT are evaluated)."""
    until = await queries.lock_failures(conn, user_id)
    if until is not None:
        raise _locked(until)


async def _count_wrong(conn: Conn, user_id: uuid.UUID) -> dt.datetime | None:
    """Count a wrong code (in PostgreSQL: every instance counts together); the lock's end
    when this one locked the codes."""
    return await queries.record_failure(
        conn,
        user_id=user_id,
        limit=LOCK_LIMIT,
        window_seconds=LOCK_WINDOW_SECONDS,
        lock_seconds=LOCK_SECONDS,
    )


def _refuse_wrong(locked: dt.datetime | None) -> NoReturn:
    """After the wrong code's count committed: refuse it."""
    if locked is not None:
        log.warning("mfa codes locked after repeated wrong codes")
        raise _locked(locked)
    raise InvalidCredentials("The code is incorrect or was already used")


async def check_code(
    services: Mfa,
    user_id: uuid.UUID,
    *,
    totp_code: str | None = None,
    recovery_code: str | None = None,
) -> str:
    """Accept a TOTP code (once) or a recovery code (once; the user is mailed); the amr
    method on success. Wrong codes count toward the lock; a locked user is refused. The
    lock is checked, the code evaluated and the outcome counted in one transaction holding
    the user's wrong-code row."""
    settings = services.settings
    async with services.db.transaction() as conn:
        await _refuse_if_locked(conn, user_id)
        if totp_code is not None:
            row = await queries.totp(conn, user_id)
            if row is not None and row["confirmed_at"] is not None:
                secret = _unseal(settings, user_id, row["secret_encrypted"])
                step = totp.matching_step(secret, totp_code)
                if step is not None and await queries.use_totp_step(
                    conn, user_id=user_id, step=step
                ):
                    await queries.clear_failures(conn, user_id)
                    return AMR_OTP
        elif recovery_code is not None:
            digest = recovery_code_hash(settings.secret_key, user_id, recovery_code)
            if await queries.use_recovery_code(conn, user_id=user_id, code_hash=digest):
                await queries.clear_failures(conn, user_id)
                summary = await identity_queries.factor_summary(conn, user_id)
                remaining = int(summary["recovery_codes"]) if summary else 0
                await mail.submit(
                    services, conn, mail.RECOVERY_CODE_USED, user_id=user_id, remaining=remaining
                )
                log.info("recovery code used", extra={"user_id": str(user_id)})
                return AMR_OTP
        locked = await _count_wrong(conn, user_id)
    _refuse_wrong(locked)


# -- sign-in tickets --------------------------------------------------------------------------


@dataclass(frozen=True)
class Ticket:
    """A first factor passed; the second is pending. `binding` goes into a cookie."""

    ticket: str
    binding: str
    methods: list[str]
    expires_at: dt.datetime


async def start_ticket(
    conn: Conn,
    settings: Settings,
    *,
    user_id: uuid.UUID,
    amr: Sequence[str],
    return_to: str | None = None,
) -> Ticket:
    """Issue a single-use, 5-minute ticket bound to this browser (binding cookie). A user an
    operator disabled gets none (403 USER_DISABLED), as `issue_session` refuses them too; nor
    does a user an enforced SSO connection binds (403 SSO_REQUIRED: SSO asks no ticket)."""
    if await identity_queries.user_disabled_at(conn, user_id) is not None:
        raise UserDisabled()
    await refuse_unless_sso(conn, user_id=user_id, method=None)
    ticket, binding = new_opaque_token(), new_opaque_token()
    expires_at = _now() + dt.timedelta(seconds=TICKET_TTL_SECONDS)
    await queries.insert_ticket(
        conn,
        token_hash=token_hash(settings.secret_key, "mfa-ticket:" + ticket),
        binding_hash=token_hash(settings.secret_key, "mfa-binding:" + binding),
        user_id=user_id,
        amr=list(amr),
        return_to=return_to,
        expires_at=expires_at,
    )
    methods = methods_of(await identity_queries.factor_summary(conn, user_id))
    return Ticket(ticket=ticket, binding=binding, methods=methods, expires_at=expires_at)


def bad_ticket() -> Unauthorized:
    # Unknown, expired, used, or another browser's: all look the same.
    return Unauthorized("invalid_ticket", "The sign-in ticket is invalid, expired or used")


async def live_ticket(services: Mfa, *, ticket: str, binding: str | None) -> Row:
    """The ticket's row when it is live and this browser holds its binding."""
    settings = services.settings
    async with services.db.connection() as conn:
        row = await queries.live_ticket(
            conn, token_hash(settings.secret_key, "mfa-ticket:" + ticket)
        )
    if row is None or not binding:
        raise bad_ticket()
    expected = token_hash(settings.secret_key, "mfa-binding:" + binding)
    if not hmac.compare_digest(bytes(row["binding_hash"]), expected):
        raise bad_ticket()
    return row


@dataclass(frozen=True)
class Completed:
    tokens: IssuedTokens
    user: Row
    return_to: str | None
    device: str | None = None  # the browser's device cookie value (the view sets it)


def sign_in_method(amr: Sequence[str]) -> str:
    """The sessions list's `method` of a sign-in finished with a second factor: its first."""
    if AMR_PASSWORD in amr:
        return PASSWORD
    if AMR_FEDERATED in amr:
        return "oidc"
    return "passkey" if AMR_PASSKEY in amr else "mfa"


async def complete_ticket(
    services: Mfa,
    ticket: Row,
    *,
    method: str,
    client: ClientMeta,
) -> Completed:
    """Spend the ticket (once) and start the session: amr is the first factor's plus this.
    The session starts like every sign-in (security event, new-browser mail)."""
    amr = list(dict.fromkeys([*ticket["amr"], method]))
    async with services.db.transaction() as conn:
        if not await queries.consume_ticket(conn, ticket["id"]):
            raise bad_ticket()
        user = await identity_queries.user_by_id(conn, ticket["user_id"])
        if user is None:
            raise bad_ticket()
        method = sign_in_method(ticket["amr"])
        started = await start_default_session(
            services.identity, conn, user_id=user["id"], client=client, method=method, amr=amr
        )
    return Completed(
        tokens=started.tokens, user=user, return_to=ticket["return_to"], device=started.device
    )


# -- reauthentication (step-up) ---------------------------------------------------------------


@dataclass(frozen=True)
class Reauthenticated:
    access_token: str
    claims: AccessClaims


async def check_password(
    services: Mfa, user_id: uuid.UUID, password: str, *, device: str | None = None
) -> str:
    """The user's password (login limit counted per address, or in the browser's own budget
    when `device`, its device cookie, was issued at a sign-in of this user); the amr method."""
    settings = services.settings
    async with services.db.connection() as conn:
        user = await identity_queries.user_credentials(conn, user_id)
        if user is None:
            raise Unauthorized("invalid_session", "Session is invalid or expired")
        await enforce(
            conn,
            settings.section(RateLimitSettings),
            secret_key=settings.secret_key,
            scope="login",
            ip=None,
            email=user["email"],
            device_cookie=device,
        )
    stored = user["password_hash"]
    matches, rehashed = await verified_rehash(stored, password)
    if stored is None or not matches:
        raise InvalidCredentials("The password is incorrect")
    if rehashed is not None:  # an imported hash: tenantd's argon2id from now on
        async with services.db.connection() as conn:
            await identity_queries.replace_password_hash(
                conn, user_id=user_id, old=stored, new=rehashed
            )
    return AMR_PASSWORD


async def reauthenticated(services: Mfa, principal: Principal, method: str) -> Reauthenticated:
    """A new access token of the same session whose auth_time is now (the family keeps it).
    An operator's impersonation never steps up (403 IMPERSONATION)."""
    if principal.act is not None:
        raise Impersonation()
    return await reauthenticated_session(
        services.identity,
        user_id=principal.user_id,
        account_id=principal.account_id,
        session_id=principal.session_id,
        amr=principal.amr,
        method=method,
    )


async def reauthenticated_session(
    services: Identity,
    *,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    session_id: uuid.UUID | None,
    amr: tuple[str, ...] = (),
    method: str,
) -> Reauthenticated:
    """The step-up of one session (family), from a request's principal or from a provider's
    callback that came back to the session which asked."""
    auth_time = time.time()
    methods = list(dict.fromkeys([*amr, method]))
    if session_id is not None:
        async with services.db.transaction() as conn:
            row = await identity_queries.refresh_auth_time(
                conn, family_id=session_id, user_id=user_id, amr=[method]
            )
            if row["act"] is not None:
                raise Impersonation()  # rolled back: the family's auth_time stays
        methods = list(row["amr"])
        auth_time = row["auth_time"].timestamp()
    token, claims = issue_access_token(
        services.keyring,
        user_id=user_id,
        account_id=account_id,
        session_id=session_id,
        amr=tuple(methods),
        auth_time=auth_time,
    )
    return Reauthenticated(access_token=token, claims=claims)


# -- operators --------------------------------------------------------------------------------


async def reset_user(conn: Conn, *, email: str) -> uuid.UUID:
    """Remove every factor and recovery code of a user (`tenantd users mfa-reset`); the
    caller's transaction also records it in the audit log and the user is mailed after."""
    user = await queries.user_by_email(conn, email)
    if user is None:
        raise NotFound("No user has this email address")
    await queries.lock_user(conn, user["id"])
    await queries.delete_totp(conn, user["id"])
    await queries.delete_passkeys(conn, user["id"])
    await queries.delete_recovery_codes(conn, user["id"])
    await queries.clear_failures(conn, user["id"])
    await identity_queries.sync_mfa_enabled(conn, user["id"])
    user_id: uuid.UUID = user["id"]
    return user_id


async def mail_reset_notice(services: Mfa, user_id: uuid.UUID) -> None:
    """Tell the user their factors were reset (suppression checked by the send path)."""
    async with services.db.connection() as conn:
        to = await queries.user_email(conn, user_id)
    if to is not None:
        notice = mail.message(mail.MFA_RESET, to, {}, services.settings.public_base_url)
        await services.email.send(notice)
