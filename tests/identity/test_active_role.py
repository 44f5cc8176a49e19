"""The one session-time view of memberships (identity/queries.py): an active role needs an
unrevoked membership in a live account; the default account is the owned live account, else the
oldest active membership. A soft-deleted account or a revoked membership is never either."""

from __future__ import annotations

import uuid

from tenantd.accounts import queries as accounts_queries
from tenantd.db import Database
from tenantd.identity.queries import active_role, default_account_id
from tests.factories import Factory


async def own(db: Database, factory: Factory, user_id: uuid.UUID) -> uuid.UUID:
    """A fresh account whose only active owner is `user_id` (its creator's membership revoked)."""
    account_id = (await factory.user()).account_id
    assert account_id is not None
    await db.execute(
        "UPDATE memberships SET revoked_at = now() WHERE account_id = %(a)s", {"a": account_id}
    )
    await factory.member(account_id, user_id, "owner")
    return account_id


async def test_deleted_accounts_and_revoked_memberships_are_not_active_roles(
    db: Database, factory: Factory
) -> None:
    user = await factory.user(account=False)
    # Owned and the oldest: a deleted account and a revoked membership still never count.
    deleted = await own(db, factory, user.id)
    revoked = await own(db, factory, user.id)
    older = (await factory.user()).account_id
    newer = (await factory.user()).account_id
    assert older and newer
    await factory.member(older, user.id, "member")
    await factory.member(newer, user.id, "admin")
    await db.execute("UPDATE accounts SET deleted_at = now() WHERE id = %(a)s", {"a": deleted})
    await db.execute(
        "UPDATE memberships SET revoked_at = now() WHERE account_id = %(a)s AND user_id = %(u)s",
        {"a": revoked, "u": user.id},
    )

    async with db.connection() as conn:
        roles = {
            account_id: await active_role(conn, user_id=user.id, account_id=account_id)
            for account_id in (deleted, revoked, older, newer)
        }
        assert roles == {deleted: None, revoked: None, older: "member", newer: "admin"}
        assert await default_account_id(conn, user.id) == older  # the oldest active membership

        owned = await own(db, factory, user.id)  # the newest, but owned: it wins
        assert await default_account_id(conn, user.id) == owned

        for account_id in (owned, older):
            await db.execute(
                "UPDATE accounts SET deleted_at = now() WHERE id = %(a)s", {"a": account_id}
            )
        assert await active_role(conn, user_id=user.id, account_id=owned) is None
        assert await default_account_id(conn, user.id) == newer
        await db.execute("UPDATE accounts SET deleted_at = now() WHERE id = %(a)s", {"a": newer})
        assert await default_account_id(conn, user.id) is None


def test_accounts_uses_the_identity_definitions() -> None:
    assert accounts_queries.active_role is active_role
    assert accounts_queries.default_account_id is default_account_id
