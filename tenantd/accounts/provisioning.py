"""Account provisioning at verification (or OAuth callback): account + owner membership, atomically.

Idempotent: the user row is locked first, so concurrent verifications of one user serialise
and the second finds the membership the first created.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from tenantd.accounts import audit
from tenantd.accounts.names import account_name
from tenantd.auth import queries as auth_queries
from tenantd.db import Conn
from tenantd.settings import Settings


@dataclass(frozen=True)
class DomainConflict:
    """A later verified signup on a claimed domain: a join request was written instead."""

    account_id: uuid.UUID  # the live account holding the claim
    domain: str
    join_request_id: uuid.UUID


@dataclass(frozen=True)
class Provisioned:
    """Outcome of provisioning. Exactly one of account_id / conflict is set.

    On a conflict the caller must COMMIT first (the join request must survive), then answer
    409 DOMAIN_CLAIMED with details {accountId, domain}, then tell the owner (after commit).
    """

    account_id: uuid.UUID | None
    created: bool
    conflict: DomainConflict | None = None


async def create_account(
    conn: Conn,
    settings: Settings,
    *,
    owner_id: uuid.UUID,
    name: str,
    claimed_domain: str | None = None,
) -> uuid.UUID:
    """Insert an account with its owner membership and default plan (caller's transaction)."""
    account_id: uuid.UUID = await conn.fetch_val(
        "INSERT INTO accounts (name, claimed_domain) VALUES (%(n)s, %(d)s) RETURNING id",
        {"n": name, "d": claimed_domain},
    )
    await conn.execute(
        "INSERT INTO memberships (account_id, user_id, role) VALUES (%(a)s, %(u)s, 'owner')",
        {"a": account_id, "u": owner_id},
    )
    await conn.execute(
        "INSERT INTO account_plans (account_id, plan_code) VALUES (%(a)s, %(p)s)",
        {"a": account_id, "p": settings.default_plan},
    )
    await audit.record(
        conn,
        account_id=account_id,
        actor_user_id=owner_id,
        action="account.created",
        target=str(account_id),
        data={"name": name},
    )
    await audit.record(
        conn,
        account_id=account_id,
        actor_user_id=owner_id,
        action="membership.created",
        target=str(owner_id),
        data={"role": "owner"},
    )
    return account_id


async def provision_personal_account(
    conn: Conn, settings: Settings, *, user_id: uuid.UUID
) -> Provisioned:
    """Give a verified user with no live membership a personal account (caller's transaction).

    Domain claiming (ACCOUNT_DOMAIN_CLAIMING) plugs in here: see the six-step order of SERVICE.md.
    """
    user = await auth_queries.lock_user(conn, user_id)
    if user is None:
        raise LookupError(f"user {user_id} does not exist")
    existing = await auth_queries.default_account_id(conn, user_id)
    if existing is not None:
        return Provisioned(account_id=existing, created=False)
    name = account_name(user["first_name"], user["last_name"], user["email"])
    account_id = await create_account(conn, settings, owner_id=user_id, name=name)
    return Provisioned(account_id=account_id, created=True)
