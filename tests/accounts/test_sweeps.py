"""The hard-delete sweep (Account: soft-deleted -> removed)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from tenantd.accounts.sweeps import purge_deleted_accounts
from tests.factories import Factory

ACCOUNT_SCOPED = (
    "memberships",
    "invitations",
    "join_requests",
    "account_plans",
    "account_feature_overrides",
    "notifications",
    "sessions",
)


async def populated_account(factory: Factory, db: Any, *, deleted_days_ago: int | None) -> Any:
    """An account with a row in every account-scoped table, optionally soft-deleted."""
    owner = await factory.user(plan="team", password=None)
    other = await factory.user(account=False, password=None)
    account_id = owner.account_id
    await factory.member(account_id, other.id, "member")
    await factory.tokens(owner)  # a session whose aid is the account
    async with db.transaction() as conn:
        await conn.execute(
            "INSERT INTO invitations (account_id, email, role, token_hash, expires_at)"
            " VALUES (%(a)s, 'i@example.com', 'member', %(h)s, now() + interval '1 day')",
            {"a": account_id, "h": uuid.uuid4().bytes},
        )
        await conn.execute(
            "INSERT INTO join_requests (account_id, user_id, domain)"
            " VALUES (%(a)s, %(u)s, 'example.com')",
            {"a": account_id, "u": other.id},
        )
        await conn.execute(
            "INSERT INTO account_feature_overrides (account_id, feature, enabled)"
            " VALUES (%(a)s, 'team_invitations', false)",
            {"a": account_id},
        )
        await conn.execute(
            "INSERT INTO notifications (user_id, account_id, event_type, title)"
            " VALUES (%(u)s, %(a)s, 'test.event', 'hello')",
            {"u": owner.id, "a": account_id},
        )
        if deleted_days_ago is not None:
            await conn.execute(
                "UPDATE accounts SET deleted_at = now() - make_interval(days => %(d)s)"
                " WHERE id = %(a)s",
                {"d": deleted_days_ago, "a": account_id},
            )
    return owner


async def scoped_counts(db: Any, account_id: uuid.UUID) -> dict[str, int]:
    return {
        table: await db.fetch_val(
            f"SELECT count(*) FROM {table} WHERE account_id = %(a)s", {"a": account_id}
        )
        for table in ACCOUNT_SCOPED
    }


async def test_purges_accounts_past_the_grace_window_with_every_scoped_row(
    factory: Factory, db: Any
) -> None:
    old = await populated_account(factory, db, deleted_days_ago=31)
    recent = await populated_account(factory, db, deleted_days_ago=29)
    live = await populated_account(factory, db, deleted_days_ago=None)
    assert all(await scoped_counts(db, old.account_id))
    audit_before = await db.fetch_val(
        "SELECT count(*) FROM audit_log WHERE account_id = %(a)s", {"a": old.account_id}
    )
    assert audit_before > 0

    assert await purge_deleted_accounts(db, dry_run=True) == 1
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 3

    assert await purge_deleted_accounts(db) == 1
    assert (
        await db.fetch_val("SELECT count(*) FROM accounts WHERE id = %(a)s", {"a": old.account_id})
        == 0
    )
    assert set((await scoped_counts(db, old.account_id)).values()) == {0}
    # The users themselves stay.
    assert await db.fetch_val("SELECT count(*) FROM users WHERE id = %(u)s", {"u": old.id}) == 1
    # Audit rows survive, plus one hard-delete row.
    rows = await db.fetch_all(
        "SELECT action, actor_user_id FROM audit_log WHERE account_id = %(a)s ORDER BY id",
        {"a": old.account_id},
    )
    assert len(rows) == audit_before + 1
    assert rows[-1] == {"action": "account.hard_deleted", "actor_user_id": None}
    # Recent and live accounts are untouched.
    for kept in (recent, live):
        assert all(await scoped_counts(db, kept.account_id))
    assert await purge_deleted_accounts(db) == 0  # idempotent


async def test_grace_window_is_a_parameter(factory: Factory, db: Any) -> None:
    await populated_account(factory, db, deleted_days_ago=3)
    assert await purge_deleted_accounts(db) == 0
    assert await purge_deleted_accounts(db, older_than_days=2) == 1


async def test_bounded_batches(factory: Factory, db: Any) -> None:
    for _ in range(5):
        owner = await factory.user(password=None)
        await db.execute(
            "UPDATE accounts SET deleted_at = now() - interval '40 days' WHERE id = %(a)s",
            {"a": owner.account_id},
        )
    assert await purge_deleted_accounts(db, batch_size=2) == 5
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 0
    with pytest.raises(ValueError):
        await purge_deleted_accounts(db, batch_size=0)


async def test_concurrent_sweeps_purge_each_account_once(factory: Factory, db: Any) -> None:
    for _ in range(12):
        owner = await factory.user(password=None)
        await db.execute(
            "UPDATE accounts SET deleted_at = now() - interval '40 days' WHERE id = %(a)s",
            {"a": owner.account_id},
        )
    counts = await asyncio.gather(*(purge_deleted_accounts(db, batch_size=2) for _ in range(4)))
    assert sum(counts) == 12
    assert (
        await db.fetch_val("SELECT count(*) FROM audit_log WHERE action = 'account.hard_deleted'")
        == 12
    )


async def test_every_foreign_key_to_accounts_cascades(db: Any) -> None:
    """A table added later with a plain FK to accounts would make the sweep fail."""
    rows = await db.fetch_all(
        "SELECT conrelid::regclass::text AS tbl, confdeltype FROM pg_constraint"
        " WHERE contype = 'f' AND confrelid = 'accounts'::regclass"
    )
    assert rows
    assert {row["tbl"]: row["confdeltype"] for row in rows if row["confdeltype"] not in "cn"} == {}
    assert "audit_log" not in {row["tbl"] for row in rows}
