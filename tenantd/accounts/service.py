"""Accounts: scope rule, list, create, read, rename, soft delete, switch.

The active account of a request comes only from the access token's aid. A route naming an
account in its URL serves it only when it is that aid; any other account id is refused with
404 NOT_FOUND when no live account has it (never existed, or soft-deleted) and 403 FORBIDDEN
otherwise, whether or not the caller is a member there (switch first).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tenantd.accounts import events as outbox_events
from tenantd.accounts import queries
from tenantd.accounts.domain import Accounts
from tenantd.accounts.errors import SeatLimitReached
from tenantd.accounts.plans import features_of
from tenantd.accounts.provisioning import create_account as insert_new_account
from tenantd.bundle import Services
from tenantd.db import Conn, Row
from tenantd.errors import Conflict, Forbidden, NotFound
from tenantd.identity import permissions
from tenantd.identity import queries as identity_queries
from tenantd.identity.errors import MfaRequired, ReauthRequired
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.tokens import AccessClaims, issue_access_token, token_hash
from tenantd.mfa import mail as mfa_mail
from tenantd.mfa import sensitive
from tenantd.mfa import service as mfa
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.principal import Principal

T = TypeVar("T")

GRACE_DAYS = 30  # SERVICE.md Limits: account deletion grace window


@dataclass(frozen=True)
class Activation:
    """A new access token pointing at another account (the refresh session follows it)."""

    account_id: uuid.UUID | None
    access_token: str
    claims: AccessClaims


# -- the scope rule and locks -----------------------------------------------------------------


async def check_scope(conn: Conn, actor: Principal, account_id: uuid.UUID) -> None:
    """Refuse a URL account that is not the token's aid: 404 if not live, else 403."""
    if actor.account_id is not None and actor.account_id == account_id:
        return
    if not await queries.account_liveness(conn, account_id):
        raise NotFound("Account not found")
    raise Forbidden("This is not your active account; switch to it first")


async def check_permitted(
    conn: Conn, actor: Principal, account_id: uuid.UUID, permission: str
) -> None:
    """Scope, then the caller's `permission` (the role resolved for the token: reads)."""
    await check_scope(conn, actor, account_id)
    permissions.require(actor, permission)


async def read_scoped(
    services: Services,
    actor: Principal,
    account_id: uuid.UUID,
    permission: str,
    read: Callable[[Conn, uuid.UUID], Awaitable[T]],
) -> T:
    """A read of the active account: scope, the caller's `permission`, then `read`."""
    async with services.db.connection() as conn:
        await check_permitted(conn, actor, account_id, permission)
        return await read(conn, account_id)


async def require_seat(
    conn: Conn, account_id: uuid.UUID, user_id: uuid.UUID, *, already_member: str | None = None
) -> None:
    """Refuse a new member when the account has no free seat (SEAT_LIMIT_REACHED, no plan:
    one seat); with `already_member`, also one who already is a member (409 with it)."""
    seats = await queries.seat_state(conn, account_id=account_id, user_id=user_id)
    if already_member is not None and seats["is_member"]:
        raise Conflict(already_member)
    cap = seats["seats"] if seats["seats"] is not None else 1
    if seats["used"] >= cap:
        raise SeatLimitReached(details={"seats": cap, "used": seats["used"]})


async def lock_live_account(conn: Conn, account_id: uuid.UUID) -> Row:
    """Lock the live account (NotFound when it is gone or soft-deleted)."""
    account = await queries.lock_account(conn, account_id)
    if account is None:
        raise NotFound("Account not found")
    return account


async def lock_scoped(
    conn: Conn, actor: Principal, account_id: uuid.UUID, permission: str | None
) -> Row:
    """Scope, then lock the live account and re-check the caller's permission (None: any
    member) with the role read under the lock.

    The guard's role is only a fast first filter; the decision uses the role (and a custom
    role's permissions) read after the lock, so a concurrent demotion, transfer or role edit
    cannot slip through: role edits take the same lock.
    """
    await check_scope(conn, actor, account_id)
    if permission is not None:
        permissions.require(actor, permission)
    account = await lock_live_account(conn, account_id)
    role, custom = await identity_queries.active_grant(
        conn, account_id=account_id, user_id=actor.user_id
    )
    if role is None:
        raise Forbidden()
    if permission is not None:
        permissions.require_grant(role, custom, permission)
    account["role"] = role
    account["role_permissions"] = custom
    return account


async def activate(
    conn: Conn,
    settings: Settings,
    keyring: Keyring,
    actor: Principal,
    account_id: uuid.UUID | None,
    refresh_token: str | None,
) -> Activation:
    """Issue an access token for `account_id` and point the caller's refresh session at it.

    The old access token is not revoked: it keeps its old account until it expires. The new
    one keeps the caller's `amr` and `auth_time`, and an operator's impersonation (`act`) with
    its end (the new token never outlives the old).
    """
    user_id = actor.user_id
    jti = uuid.uuid4()
    session_id = None
    if refresh_token:
        session_id = await identity_queries.move_session(
            conn,
            token_hash=token_hash(settings.secret_key, refresh_token),
            user_id=user_id,
            account_id=account_id,
            access_jti=jti,
        )
    token, claims = issue_access_token(
        keyring,
        user_id=user_id,
        account_id=account_id,
        jti=jti,
        session_id=session_id,  # logout of the session ends this token too
        amr=actor.amr,
        auth_time=actor.auth_time,
        act=actor.act,
        not_after=actor.expires_at if actor.act is not None else None,
    )
    return Activation(account_id=account_id, access_token=token, claims=claims)


# -- accounts ---------------------------------------------------------------------------------


async def list_accounts(services: Services, actor: Principal) -> list[Row]:
    """The caller's live accounts with the caller's role in each."""
    async with services.db.connection() as conn:
        return await queries.accounts_of_user(conn, actor.user_id)


@dataclass(frozen=True)
class Created:
    account: Row
    activation: Activation | None  # set when the caller had no active account


async def create_account(
    services: Accounts, actor: Principal, *, name: str, refresh_token: str | None
) -> Created:
    """A new account with the caller as owner; a caller without an active account lands in it."""
    async with services.db.transaction() as conn:
        account_id = await insert_new_account(
            conn, services.settings, owner_id=actor.user_id, name=name
        )
        rows = await queries.accounts_of_user(conn, actor.user_id)
        activation = None
        if actor.account_id is None:
            activation = await activate(
                conn, services.settings, services.identity.keyring, actor, account_id, refresh_token
            )
    account = next(row for row in rows if row["id"] == account_id)
    return Created(account=account, activation=activation)


@dataclass(frozen=True)
class Detail:
    """An account as its members see it: plan, seat cap and use, resolved features."""

    id: uuid.UUID
    name: str
    created_at: dt.datetime
    claimed_domain: str | None
    role: str | None
    plan: str | None
    seats: int
    seats_used: int
    features: dict[str, bool]
    require_mfa: bool = False


def detail_of(row: Row, role: str | None) -> Detail:
    return Detail(
        id=row["id"],
        name=row["name"],
        created_at=row["created_at"],
        claimed_domain=row["claimed_domain"],
        role=role,
        plan=row["plan"],
        seats=row["seats"] if row["seats"] is not None else 1,
        seats_used=row["seats_used"],
        features=features_of(row),
        require_mfa=bool(row["require_mfa"]),
    )


async def read_account(services: Services, actor: Principal, account_id: uuid.UUID) -> Detail:
    """The active account with plan, seats and resolved features (any member)."""
    row = await read_scoped(
        services, actor, account_id, permissions.ACCOUNT_READ, queries.account_detail
    )
    if row is None or row["deleted_at"] is not None:
        raise NotFound("Account not found")
    return detail_of(row, actor.role)


async def rename_account(
    services: Services, actor: Principal, account_id: uuid.UUID, *, name: str
) -> Detail:
    """Rename (owner or admin)."""
    async with services.db.transaction() as conn:
        account = await lock_scoped(conn, actor, account_id, permissions.ACCOUNT_UPDATE)
        if account["name"] != name:
            await queries.rename_account(conn, account_id=account_id, name=name)
            await outbox_events.account_audited(
                conn,
                account_id,
                actor.user_id,
                "account.renamed",
                {"from": account["name"], "to": name},
            )
            await outbox_events.account(
                conn,
                "account.updated",
                account_id,
                outbox_events.actor_of(actor.user_id),
                previous={"name": account["name"]},
            )
        row = await queries.account_detail(conn, account_id)
    assert row is not None
    return detail_of(row, account["role"])


async def activate_next_account(
    conn: Conn, services: Accounts, *, actor: Principal, refresh_token: str | None
) -> Activation:
    """After leaving or deleting the active account: the session moves to the next one."""
    next_account = await queries.default_account_id(
        conn, actor.user_id, factor=identity_queries.used_factor(actor.amr)
    )
    return await activate(
        conn, services.settings, services.identity.keyring, actor, next_account, refresh_token
    )


async def refuse_without_mfa(conn: Conn, account: Row, actor: Principal) -> None:
    """An account requiring MFA cannot become active for a user without a factor (403
    MFA_REQUIRED), nor for a session that used none (403 REAUTH_REQUIRED: step up with the
    authenticator app or a passkey, POST /api/v1/auth/reauth)."""
    if not account["require_mfa"]:
        return
    if not await mfa.mfa_enabled(conn, actor.user_id):
        raise MfaRequired(details={"accountId": str(account["id"])})
    if not identity_queries.used_factor(actor.amr):
        summary = await identity_queries.factor_summary(conn, actor.user_id)
        factors = mfa.methods_of(summary)
        raise ReauthRequired(
            [m for m in factors if m != "recoveryCode"],
            "This account requires a second factor: confirm it is you with one",
        )


async def refuse_owed_factor(services: Services, actor: Principal) -> None:
    """Every request of a session that owes its account's second factor
    (`Principal.owes_factor`: the account requires MFA, read with the token's cached state,
    and the session's amr holds no factor), however long ago its token was issued: refused
    as a switch into the account would be (MFA_REQUIRED, or REAUTH_REQUIRED listing the
    factors to step up with)."""
    async with services.db.connection() as conn:
        await refuse_without_mfa(conn, {"id": actor.account_id, "require_mfa": True}, actor)
    raise ReauthRequired([], "This account requires a second factor: sign in with one")


@dataclass(frozen=True)
class PolicyChange:
    required: bool
    notified: int


async def update_account(
    services: Services,
    actor: Principal,
    account_id: uuid.UUID,
    *,
    name: str | None,
    require_mfa: bool | None,
) -> Detail:
    """PATCH: rename (admin+) and/or set requireMfa (owner, step-up)."""
    if require_mfa is not None:
        await set_require_mfa(services, actor, account_id, required=require_mfa)
    if name is not None:
        return await rename_account(services, actor, account_id, name=name)
    return await read_account(services, actor, account_id)


async def set_require_mfa(
    services: Services, actor: Principal, account_id: uuid.UUID, *, required: bool
) -> PolicyChange:
    """Owner only: turn the MFA requirement on or off (a sensitive action: step-up, the owner
    is told with a link that sets it back); switching it on mails every member without a
    factor (after commit). The owner switches it on from a session that used a factor
    (MFA_REQUIRED or REAUTH_REQUIRED otherwise): every other session in the account is
    refused from its next request on (`refuse_owed_factor`), which would lock the owner out."""
    await sensitive.require(services, actor, sensitive.MFA_POLICY_CHANGED)
    notified = 0
    async with services.db.transaction() as conn:
        account = await lock_scoped(conn, actor, account_id, permissions.ACCOUNT_REQUIRE_MFA)
        if bool(account["require_mfa"]) == required:
            return PolicyChange(required=required, notified=0)
        if required:
            await refuse_without_mfa(conn, {**account, "require_mfa": True}, actor)
        await queries.set_require_mfa(conn, account_id=account_id, required=required)
        await sensitive.performed(
            services,
            conn,
            actor=actor,
            action=sensitive.MFA_POLICY_CHANGED,
            undo={"accountId": str(account_id), "required": not required},
            data={"accountId": str(account_id), "required": required},
        )
        await outbox_events.account_audited(
            conn,
            account_id,
            actor.user_id,
            "account.mfa_required" if required else "account.mfa_not_required",
        )
        if required:
            for user_id in await queries.members_without_mfa(conn, account_id):
                await mfa_mail.submit(
                    services,
                    conn,
                    mfa_mail.ACCOUNT_REQUIRES_MFA,
                    user_id=user_id,
                    account_name=account["name"],
                )
                notified += 1
    return PolicyChange(required=required, notified=notified)


@dataclass(frozen=True)
class Deleted:
    account_id: uuid.UUID
    deleted_at: dt.datetime
    purge_after: dt.datetime
    activation: Activation


async def delete_account(
    services: Accounts,
    actor: Principal,
    account_id: uuid.UUID,
    *,
    refresh_token: str | None,
) -> Deleted:
    """Soft delete (owner only): deleted_at set, claim released, purged after the grace window.

    The caller's session moves to its next account (or to none). A sensitive action: step-up;
    the owner is told, with a link that restores the account.
    """
    await sensitive.require(services, actor, sensitive.ACCOUNT_DELETED)
    async with services.db.transaction() as conn:
        await lock_scoped(conn, actor, account_id, permissions.ACCOUNT_DELETE)
        deleted_at, purge_after = await soft_delete_locked(conn, account_id, actor.user_id)
        await sensitive.performed(
            services,
            conn,
            actor=actor,
            action=sensitive.ACCOUNT_DELETED,
            undo={"accountId": str(account_id)},
            data={"accountId": str(account_id)},
        )
        activation = await activate_next_account(
            conn, services, actor=actor, refresh_token=refresh_token
        )
    return Deleted(
        account_id=account_id,
        deleted_at=deleted_at,
        purge_after=purge_after,
        activation=activation,
    )


async def soft_delete_locked(
    conn: Conn, account_id: uuid.UUID, by: uuid.UUID | None, *, reason: str | None = None
) -> tuple[dt.datetime, dt.datetime]:
    """Soft delete an account this transaction has locked, by whatever action: deleted_at
    set (its claim released), its audit row and its account.deleted event, each saying when
    it is purged. (deleted_at, purge_after)"""
    deleted_at = await queries.soft_delete_account(conn, account_id)
    purge_after = deleted_at + dt.timedelta(days=GRACE_DAYS)
    data = {"purgeAfter": purge_after.isoformat()}
    if reason is not None:
        data["reason"] = reason
    await outbox_events.account_audited(conn, account_id, by, "account.soft_deleted", data)
    await outbox_events.account(
        conn,
        "account.deleted",
        account_id,
        outbox_events.actor_of(by),
        previous={"deletedAt": None},
        extra={"purgeAfter": purge_after},
    )
    return deleted_at, purge_after


@dataclass(frozen=True)
class Switched:
    account: Row
    role: str
    activation: Activation


async def switch_account(
    services: Accounts,
    actor: Principal,
    *,
    account_id: uuid.UUID,
    refresh_token: str | None,
) -> Switched:
    """A new access token whose aid is another account the caller is an active member of."""
    async with services.db.transaction() as conn:
        account = await queries.account_detail(conn, account_id)
        if account is None or account["deleted_at"] is not None:
            raise NotFound("Account not found")
        role = await queries.active_role(conn, account_id=account_id, user_id=actor.user_id)
        if role is None:
            raise Forbidden("You are not a member of this account")
        await refuse_without_mfa(conn, account, actor)
        activation = await activate(
            conn, services.settings, services.identity.keyring, actor, account_id, refresh_token
        )
    return Switched(account=account, role=role, activation=activation)
