"""Sessions: issue, rotate (refresh), revoke. Refresh tokens are stored only as keyed hashes.

A session family is one sign-in; its id is the `sid` claim of every access token issued to
it, so ending the family ends those tokens too. Rotation replaces the family's live row with
its successor and keeps only the row it replaced, so a family holds one live row (and the
one before it) however often it is renewed.

Within REFRESH_REUSE_INTERVAL_SECONDS a rotated-out token whose successor is still unused
(two tabs refreshing at once) repeats that rotation: the successor is derived from the token
it replaces, so the repeat answers the same successor and revokes nothing. Any other use of
a rotated-out token is reuse (a theft signal): the whole family is revoked.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tenantd.db import Conn, Row
from tenantd.errors import Unauthorized
from tenantd.identity import queries
from tenantd.identity.errors import MfaRequired, UserDisabled
from tenantd.identity.events import sessions_revoked
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.rotation import RotationBatcher, RotationRequest
from tenantd.identity.settings import IdentitySettings
from tenantd.identity.tokens import (
    AccessClaims,
    issue_access_token,
    new_refresh_token,
    refresh_token_family,
    successor_refresh_token,
    token_hash,
)
from tenantd.ops.ratelimit import Counter, Verdict
from tenantd.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClientMeta:
    """What the request tells about the browser: User-Agent, address, device cookie."""

    user_agent: str | None = None
    ip: str | None = None
    device: str | None = None


NO_CLIENT = ClientMeta()  # a session opened outside a request (tests, imports)


@dataclass(frozen=True)
class IssuedTokens:
    access_token: str
    access: AccessClaims
    refresh_token: str
    refresh_expires_at: dt.datetime


@dataclass(frozen=True)
class Renewal:
    """What the locked refresh path decided: new tokens, or why not."""

    tokens: IssuedTokens | None = None
    refusal: str | None = None
    # Set when this renewal revoked a live family for reuse: the user to tell.
    revoked_user_id: uuid.UUID | None = None
    family_id: uuid.UUID | None = None  # the family revoked for reuse

    def issued(self) -> IssuedTokens:
        """The new tokens; a refusal is raised as invalid_session."""
        if self.tokens is None:
            log.info("refresh refused", extra={"reason": self.refusal})
            if self.refusal == "mfa_required":
                raise MfaRequired()
            if self.refusal == "disabled":
                raise UserDisabled()
            raise Unauthorized("invalid_session", "Session is invalid or expired")
        return self.tokens


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def issue_session(
    conn: Conn,
    settings: Settings,
    *,
    keyring: Keyring,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    client: ClientMeta = NO_CLIENT,
    amr: Sequence[str] = ("pwd",),
    auth_time: float | None = None,
    method: str | None = None,
) -> IssuedTokens:
    """Start a session family: its first refresh row and a matching access token.

    `amr` says how the user signed in (RFC 8176) and `auth_time` when (default now); the
    family keeps both (`session_auth`), so every token it is renewed with carries them.
    `method` names the sign-in for the sessions list (password, email_link, a provider).

    Every sign-in path comes here: a user an operator disabled is refused (403 USER_DISABLED)
    and the caller's transaction rolls back; otherwise the user's last sign-in is now.
    """
    if await queries.mark_signed_in(conn, user_id) is not None:
        raise UserDisabled()
    family_id = uuid.uuid4()
    moment = time.time() if auth_time is None else auth_time
    auth = SessionAuth(tuple(amr), moment)
    await queries.insert_session_auth(
        conn,
        family_id=family_id,
        user_id=user_id,
        amr=list(auth.amr),
        auth_time=dt.datetime.fromtimestamp(moment, dt.UTC),
    )
    return await _insert_session(
        conn,
        settings,
        keyring=keyring,
        family_id=family_id,
        refresh=new_refresh_token(settings.secret_key, family_id),
        user_id=user_id,
        account_id=account_id,
        client=client,
        auth=auth,
        method=method,
    )


async def issue_impersonation_session(
    conn: Conn,
    settings: Settings,
    *,
    keyring: Keyring,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    act: str,
    lifetime: dt.timedelta,
    client: ClientMeta = NO_CLIENT,
) -> IssuedTokens:
    """A session an operator (`act`) opens as the user: one access token carrying the `act`
    claim and living `lifetime` at most, a session row ending with it (so the user's sessions
    list shows it and logout-all ends it), and no refresh token (none is ever handed out)."""
    if await queries.user_disabled_at(conn, user_id) is not None:
        raise UserDisabled()
    family_id = uuid.uuid4()
    now = _utcnow()
    await queries.insert_session_auth(
        conn, family_id=family_id, user_id=user_id, amr=[], auth_time=now, act=act
    )
    issued = await _insert_session(
        conn,
        settings,
        keyring=keyring,
        family_id=family_id,
        refresh=new_refresh_token(settings.secret_key, family_id),  # stored hashed, never given
        user_id=user_id,
        account_id=account_id,
        client=client,
        auth=SessionAuth(),
        method="impersonation",
        act=act,
        ends=now + lifetime,
    )
    return replace(issued, refresh_token="")


@dataclass(frozen=True)
class SessionAuth:
    """How a session family signed in (amr) and when it last proved it (epoch seconds)."""

    amr: tuple[str, ...] = ()
    auth_time: float | None = None

    @classmethod
    def of(cls, row: Row | None) -> SessionAuth:
        if row is None or row["auth_time"] is None:
            return cls()
        return cls(tuple(row["amr"] or ()), row["auth_time"].timestamp())


async def _insert_session(
    conn: Conn,
    settings: Settings,
    *,
    keyring: Keyring,
    family_id: uuid.UUID,
    refresh: str,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    client: ClientMeta,
    auth: SessionAuth,
    method: str | None = None,
    signed_in_at: dt.datetime | None = None,
    act: str | None = None,
    ends: dt.datetime | None = None,
) -> IssuedTokens:
    """A session row and its access token; `ends` (an impersonation's) caps both, else the
    row lives the refresh token's TTL."""
    access_token, claims = issue_access_token(
        keyring,
        user_id=user_id,
        account_id=account_id,
        session_id=family_id,
        amr=auth.amr,
        auth_time=auth.auth_time,
        act=act,
        not_after=None if ends is None else ends.timestamp(),
    )
    expires_at = ends or _utcnow() + dt.timedelta(
        days=settings.section(IdentitySettings).refresh_token_ttl_days
    )
    await queries.insert_session(
        conn,
        family_id=family_id,
        user_id=user_id,
        account_id=account_id,
        token_hash=token_hash(settings.secret_key, refresh),
        expires_at=expires_at,
        access_jti=claims.jti,
        user_agent=client.user_agent,
        ip=client.ip,
        method=method,
        signed_in_at=signed_in_at,
    )
    return IssuedTokens(access_token, claims, refresh, expires_at)


@dataclass(frozen=True)
class FastRenewal:
    """What the batched path did with a refresh: renewed it, refused it for a rate limit, or
    left it to the locked path (`counted`: its rate-limit counters moved already)."""

    renewed: tuple[IssuedTokens, Row] | None = None
    counted: bool = False
    verdict: Verdict | None = None  # over a rate limit: not renewed, nothing more to do


async def renew_batched(
    batcher: RotationBatcher,
    settings: Settings,
    *,
    keyring: Keyring,
    refresh_token: str,
    client: ClientMeta = NO_CLIENT,
    family_id: uuid.UUID | None = None,
    counters: Sequence[Counter] = (),
) -> FastRenewal:
    """Renew through the batched statement (`batcher`), counting `counters` (the request's
    rate limits) in the same statement. Not renewed there (not renewable, raced, a repeat):
    the locked path (`rotate`) decides. `family_id` is the family the token names, when the
    caller has checked it already."""
    secret_key = settings.secret_key
    family_id = family_id or refresh_token_family(secret_key, refresh_token)
    if family_id is None:
        return FastRenewal()  # not one of ours, or from before tokens named their family
    refresh = successor_refresh_token(secret_key, refresh_token, family_id)
    jti = uuid.uuid4()
    outcome = await batcher.run(
        RotationRequest(
            old_hash=token_hash(secret_key, refresh_token),
            family_id=family_id,
            new_hash=token_hash(secret_key, refresh),
            jti=jti,
            user_agent=(client.user_agent or "")[:512] or None,
            ip=client.ip,
            counters=tuple(counters),
        )
    )
    user = outcome.row
    if user is None:
        return FastRenewal(counted=outcome.counted, verdict=outcome.verdict)
    auth = SessionAuth.of(user)
    access_token, claims = issue_access_token(
        keyring,
        user_id=user["id"],
        account_id=user["account_id"],
        jti=jti,
        session_id=family_id,
        amr=auth.amr,
        auth_time=auth.auth_time,
    )
    tokens = IssuedTokens(access_token, claims, refresh, user["expires_at"])
    return FastRenewal((tokens, user), counted=outcome.counted)


async def rotate(
    conn: Conn,
    settings: Settings,
    *,
    keyring: Keyring,
    refresh_token: str,
    client: ClientMeta = NO_CLIENT,
) -> Renewal:
    """The locked refresh path: rotate, repeat a rotation within the reuse interval, or say
    why not. Reuse revokes the whole family. Run it in the caller's transaction."""
    secret_key = settings.secret_key
    row = await queries.lock_session_by_hash(conn, token_hash(secret_key, refresh_token))
    if row is None:
        family_id = refresh_token_family(secret_key, refresh_token)
        if family_id is None:
            return Renewal(refusal="unknown")
        # One of our tokens whose row is gone: rotated out before the row now kept.
        return await _revoke_for_reuse(conn, family_id)
    if row["user_disabled_at"] is not None:
        return Renewal(refusal="disabled")
    if row["revoked_at"] is not None or row["family_revoked"]:
        return Renewal(refusal="revoked")
    successor = successor_refresh_token(secret_key, refresh_token, row["family_id"])
    if row["rotated_at"] is not None:
        return await _repeat_or_revoke(conn, settings, row, successor, keyring=keyring)
    refusal = await _refusal(conn, row)
    if refusal is not None:
        return Renewal(refusal=refusal)
    await queries.retire_session(conn, session_id=row["id"], family_id=row["family_id"])
    tokens = await _insert_session(
        conn,
        settings,
        keyring=keyring,
        family_id=row["family_id"],
        refresh=successor,
        user_id=row["user_id"],
        account_id=row["account_id"],
        client=client,
        auth=SessionAuth.of(await queries.session_auth(conn, row["family_id"])),
        method=row["method"],
        signed_in_at=row["signed_in_at"] or row["created_at"],
    )
    return Renewal(tokens=tokens)


async def _repeat_or_revoke(
    conn: Conn, settings: Settings, row: Row, successor_token: str, *, keyring: Keyring
) -> Renewal:
    """A rotated-out token: within the interval and with its successor unused, answer that
    successor again (a fresh access token, nothing revoked); otherwise it is reuse."""
    interval = dt.timedelta(
        seconds=settings.section(IdentitySettings).refresh_reuse_interval_seconds
    )
    successor = await queries.session_by_hash(
        conn, token_hash(settings.secret_key, successor_token)
    )
    if (
        successor is not None
        and successor["rotated_at"] is None
        and row["since_rotated"] < interval  # never with an interval of 0
    ):
        refusal = await _refusal(conn, successor)
        if refusal is not None:
            return Renewal(refusal=refusal)
        auth = SessionAuth.of(await queries.session_auth(conn, successor["family_id"]))
        access_token, claims = issue_access_token(
            keyring,
            user_id=successor["user_id"],
            account_id=successor["account_id"],
            session_id=successor["family_id"],
            amr=auth.amr,
            auth_time=auth.auth_time,
        )
        tokens = IssuedTokens(access_token, claims, successor_token, successor["expires_at"])
        return Renewal(tokens=tokens)
    return await _revoke_for_reuse(conn, row["family_id"])


async def _revoke_for_reuse(conn: Conn, family_id: uuid.UUID) -> Renewal:
    user_id = await queries.revoke_family(conn, family_id)
    if user_id is None:
        return Renewal(refusal="revoked")  # ended already: nothing new to tell anyone
    log.warning("rotated refresh token reused; session family revoked")
    return Renewal(refusal="reused", revoked_user_id=user_id, family_id=family_id)


async def _refusal(conn: Conn, row: Row) -> str | None:
    """Why a session row may not be renewed, or None when it may."""
    if row["revoked_at"] is not None or row["family_revoked"]:
        return "revoked"
    if row["rotated_at"] is not None:
        return "reused"
    if row["expires_at"] <= _utcnow():
        return "expired"
    cutoff = row["tokens_valid_after"]
    if cutoff is not None and row["created_at"] < cutoff:
        return "cutoff"
    account_id = row["account_id"]
    if account_id is not None and (
        await queries.active_role(conn, user_id=row["user_id"], account_id=account_id) is None
    ):
        return "membership"
    if row["account_requires_mfa"] and not (row["mfa_enabled"] and row["used_factor"]):
        # The account requires MFA: the user has no factor, or this session used none.
        return "mfa_required"
    return None


async def revoke_session(
    conn: Conn, settings: Settings, *, refresh_token: str | None, access: AccessClaims | None
) -> None:
    """Logout: end this session family, and with it every access token issued to it (sid)."""
    families: set[uuid.UUID] = set()
    if access is not None and access.session_id is not None:
        families.add(access.session_id)
    if refresh_token:
        family_id = await queries.session_family(
            conn, token_hash(settings.secret_key, refresh_token)
        )
        if family_id is not None:
            families.add(family_id)
    for family_id in sorted(families):
        await queries.revoke_family(conn, family_id)
    if access is not None:
        # A token from before access tokens carried their sid ends by its own id.
        await queries.revoke_jti(
            conn,
            jti=access.jti,
            user_id=access.user_id,
            expires_at=dt.datetime.fromtimestamp(access.expires_at, dt.UTC),
        )


async def end_account_sessions(
    conn: Conn, *, user_id: uuid.UUID, account_id: uuid.UUID
) -> list[uuid.UUID]:
    """A user who lost an account loses its sessions there at once: every family pointing at
    it ends (its refresh token and, by `sid`, its access tokens, on every instance)."""
    return await queries.revoke_account_families(conn, user_id=user_id, account_id=account_id)


async def revoke_all(conn: Conn, *, user_id: uuid.UUID) -> None:
    """User-wide cutoff: every access token issued before now and every session ends."""
    async with conn.transaction():
        await sessions_revoked(conn, user_id)
        await queries.cut_off_tokens(conn, user_id)
        await queries.revoke_user_sessions(conn, user_id)
