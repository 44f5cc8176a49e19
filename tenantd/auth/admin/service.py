"""Operators' user administration: the rules behind `/api/v1/admin/users` (API-key scope
`users:manage`) and `tenantd users ...` (the CLI calls these same functions).

The actor is the API key that called, or the operator at the CLI; every change writes an
audit row naming it (`{"actor": {"type": "api_key", "id": ...}}` or `{"type": "operator"}`).

Disabling a user ends every session at once (the user-wide cutoff) and refuses every sign-in
from then on: `issue_session`, where every sign-in path starts its session, answers 403
USER_DISABLED, and so does a refresh.

Impersonation: a one-time link (`/impersonate?token=T`, the token stored only as a keyed hash,
usable for IMPERSONATION_LINK_TTL) opens a session as the user whose access token carries the
`act` claim `{sub: "apikey:<id>" | "operator"}`. It lives IMPERSONATION_TTL at most, gets no
refresh token, is refused every sensitive action (403 IMPERSONATION, in the sensitive-action
guard), and every hosted page shows a banner. The link's creation is audited with its reason;
its use writes a security event the user sees.
"""

from __future__ import annotations

import datetime as dt
import uuid
from dataclasses import dataclass
from typing import Any

from tenantd import audit
from tenantd.apikeys.principal import ActingKey
from tenantd.auth import deletion
from tenantd.auth import service as auth_service
from tenantd.auth.admin import queries
from tenantd.auth.domain import Auth
from tenantd.bundle import Services
from tenantd.db import Conn, Row
from tenantd.errors import Conflict, NotFound, ValidationFailed
from tenantd.identity import queries as identity_queries
from tenantd.identity.sessions import (
    ClientMeta,
    IssuedTokens,
    issue_impersonation_session,
    revoke_all,
)
from tenantd.identity.signin import record_security
from tenantd.identity.tokens import new_opaque_token, token_hash
from tenantd.mfa import sensitive
from tenantd.settings import Settings
from tenantd.web.cursors import decode_keyset, encode_keyset

AdminActor = ActingKey | sensitive.Operator

IMPERSONATION_LINK_TTL = dt.timedelta(minutes=5)  # how long the link may be opened
IMPERSONATION_TTL = dt.timedelta(minutes=15)  # how long the session it opens lasts
IMPERSONATE_PATH = "/impersonate"
IMPERSONATED = "impersonated"  # the security event the user sees
MAX_LIMIT = 200


def actor_sub(actor: AdminActor) -> str:
    """The `act` claim's sub: `apikey:<id>` or `operator`."""
    return f"apikey:{actor.id}" if isinstance(actor, ActingKey) else "operator"


def actor_json(actor: AdminActor) -> dict[str, Any]:
    if isinstance(actor, ActingKey):
        return {**actor.actor, "name": actor.name}
    return {"type": "operator"}


async def _audit(
    conn: Conn,
    actor: AdminActor,
    action: str,
    user_id: uuid.UUID,
    data: dict[str, Any] | None = None,
) -> None:
    await audit.record_user(
        conn,
        user_id,
        action,
        data={"actor": actor_json(actor), **(data or {})},
    )


# -- the list -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class UserPage:
    items: list[Row]
    next_cursor: str | None


def encode_cursor(row: Row) -> str:
    return encode_keyset(row["created_at"], row["id"])


def decode_cursor(cursor: str) -> tuple[dt.datetime, uuid.UUID]:
    return decode_keyset(cursor, refusal="not a cursor this list gave")


async def list_users(
    services: Services, *, query: str | None = None, cursor: str | None = None, limit: int = 50
) -> UserPage:
    """Live users newest first, searched by email and names; keyset pages of `limit`."""
    after = decode_cursor(cursor) if cursor else None
    limit = max(1, min(limit, MAX_LIMIT))
    async with services.db.connection() as conn:
        rows = await queries.search_users(
            conn, query=(query or "").strip() or None, after=after, limit=limit + 1
        )
    more = len(rows) > limit
    rows = rows[:limit]
    return UserPage(rows, encode_cursor(rows[-1]) if more else None)


async def show_user(services: Services, *, user_id: uuid.UUID) -> dict[str, Any]:
    """One live user: the list item, memberships and sign-in methods (never a secret)."""
    async with services.db.connection() as conn:
        row = await queries.user_item(conn, user_id)
        if row is None:
            raise NotFound("User not found")
        memberships = await queries.memberships(conn, user_id)
        providers = await queries.auth_providers(conn, user_id)
    return {
        **user_json(row),
        "memberships": [
            {"accountId": m["account_id"], "accountName": m["name"], "role": m["role"]}
            for m in memberships
        ],
        "authProviders": [
            {"provider": p["provider"], "detail": p["detail"], "createdAt": p["created_at"]}
            for p in providers
        ],
    }


def user_json(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "email": row["email"],
        "emailVerifiedAt": row["email_verified_at"],
        "disabledAt": row["disabled_at"],
        "createdAt": row["created_at"],
        "lastSignInAt": row["last_sign_in_at"],
    }


async def user_id_by_email(services: Services, email: str) -> uuid.UUID:
    """The CLI names users by address."""
    async with services.db.connection() as conn:
        user_id = await queries.user_id_by_email(conn, email.strip())
    if user_id is None:
        raise NotFound("No user has this email address")
    return user_id


# -- changes ------------------------------------------------------------------------------------


async def _locked(conn: Conn, user_id: uuid.UUID) -> Row:
    row = await queries.lock_live_user(conn, user_id)
    if row is None:
        raise NotFound("User not found")
    return row


async def disable_user(services: Services, actor: AdminActor, *, user_id: uuid.UUID) -> Row:
    """Disable a user: every session and access token ends now; every sign-in and refresh
    is refused with USER_DISABLED until it is enabled again."""
    async with services.db.transaction() as conn:
        await _locked(conn, user_id)
        await identity_queries.set_disabled(conn, user_id, disabled=True)
        await revoke_all(conn, user_id=user_id)
        await _audit(conn, actor, "user.disabled", user_id)
        row = await queries.user_item(conn, user_id)
    assert row is not None
    return row


async def enable_user(services: Services, actor: AdminActor, *, user_id: uuid.UUID) -> Row:
    """Let a disabled user sign in again (their ended sessions stay ended)."""
    async with services.db.transaction() as conn:
        await _locked(conn, user_id)
        await identity_queries.set_disabled(conn, user_id, disabled=False)
        await _audit(conn, actor, "user.enabled", user_id)
        row = await queries.user_item(conn, user_id)
    assert row is not None
    return row


async def delete_user(
    services: Services, actor: AdminActor, *, user_id: uuid.UUID
) -> deletion.UserDeleted:
    """The erasure of `DELETE /api/v1/users/me`, performed by the operator (no step-up)."""
    done = await deletion.delete_user(services, sensitive.OPERATOR, user_id=user_id)
    async with services.db.transaction() as conn:
        await _audit(conn, actor, "user.deleted_by_operator", user_id)
    return done


async def resend_verification(services: Services, actor: AdminActor, *, user_id: uuid.UUID) -> None:
    """Mail the user a fresh verification link (409 CONFLICT when already verified)."""
    async with services.db.transaction() as conn:
        user = await _locked(conn, user_id)
        if user["email_verified_at"] is not None:
            raise Conflict("The email address is verified already")
        await _audit(conn, actor, "user.verification_resent", user_id)
    await auth_service.resend_verification(services, email=user["email"])


def impersonation_link(settings: Settings, token: str) -> str:
    return f"{settings.public_base_url.rstrip('/')}{IMPERSONATE_PATH}?token={token}"


async def impersonate(
    services: Services, actor: AdminActor, *, user_id: uuid.UUID, reason: str
) -> str:
    """A one-time link that signs in as the user (see the module docstring); audited with
    its reason."""
    reason = reason.strip()
    if not reason:
        raise ValidationFailed({"reason": "say why you sign in as this user"})
    token = new_opaque_token()
    async with services.db.transaction() as conn:
        user = await _locked(conn, user_id)
        if user["disabled_at"] is not None:
            raise Conflict("The user is disabled: enable it first")
        link_id = await queries.insert_impersonation_link(
            conn,
            token_hash=token_hash(services.settings.secret_key, "impersonate:" + token),
            user_id=user_id,
            actor=actor_sub(actor),
            reason=reason,
            ttl=IMPERSONATION_LINK_TTL,
        )
        await _audit(
            conn,
            actor,
            "user.impersonation_link_created",
            user_id,
            {"reason": reason, "linkId": str(link_id)},
        )
    return impersonation_link(services.settings, token)


async def start_impersonation(services: Auth, *, token: str, client: ClientMeta) -> IssuedTokens:
    """Open an impersonation link once: the session it starts (no refresh token). An unknown,
    used or expired link is refused (400 INVALID_TOKEN)."""
    digest = token_hash(services.settings.secret_key, "impersonate:" + token)
    async with services.db.transaction() as conn:
        link = await queries.spend_impersonation_link(conn, digest)
        if link is None:
            raise auth_service.bad_token()
        user_id: uuid.UUID = link["user_id"]
        account_id = await identity_queries.default_account_id(conn, user_id)
        tokens = await issue_impersonation_session(
            conn,
            services.settings,
            keyring=services.identity.keyring,
            user_id=user_id,
            account_id=account_id,
            act=link["actor"],
            lifetime=IMPERSONATION_TTL,
            client=client,
        )
        session_id = tokens.access.session_id
        await queries.link_session(conn, link["id"], session_id)
        await record_security(
            conn,
            client,
            user_id=user_id,
            kind=IMPERSONATED,
            session_id=session_id,
            data={"by": link["actor"], "reason": link["reason"]},
        )
        await audit.record_user(
            conn,
            user_id,
            "user.impersonation_started",
            data={
                "act": link["actor"],
                "reason": link["reason"],
                "linkId": str(link["id"]),
                "sessionId": str(session_id),
            },
        )
    return tokens
