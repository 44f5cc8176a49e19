"""The tenancy sweeps run through the registry (lock, bookkeeping, counts, dry run)."""

from __future__ import annotations

from tenantd.app.bundle import Domains
from tenantd.app.plugins import registered_sweeps
from tenantd.db import Database
from tenantd.ops.sweeps import run_sweep
from tests.factories import Factory


async def test_accounts_sweep_purges_only_past_the_grace_window(
    standalone_services: Domains, db: Database, factory: Factory
) -> None:
    old = await factory.user()
    recent = await factory.user()
    await db.execute(
        "UPDATE accounts SET deleted_at = now() - interval '31 days' WHERE id = %(a)s",
        {"a": old.account_id},
    )
    await db.execute(
        "UPDATE accounts SET deleted_at = now() - interval '29 days' WHERE id = %(a)s",
        {"a": recent.account_id},
    )
    sweep = registered_sweeps()["accounts"]
    dry = await run_sweep(standalone_services, sweep, dry_run=True)
    assert (dry.status, dry.counts) == ("dry_run", {"accounts": 1})
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 2

    outcome = await run_sweep(standalone_services, sweep)
    assert (outcome.status, outcome.counts) == ("ok", {"accounts": 1})
    remaining = await db.fetch_all("SELECT id FROM accounts")
    assert remaining == [{"id": recent.account_id}]
    assert await db.fetch_val("SELECT last_counts FROM sweep_runs WHERE name = 'accounts'") == {
        "accounts": 1
    }


async def test_invitations_sweep_revokes_expired_pending_ones(
    standalone_services: Domains, db: Database, factory: Factory
) -> None:
    owner = await factory.user(plan="team")
    await db.execute(
        "INSERT INTO invitations (account_id, email, role, token_hash, expires_at) VALUES"
        " (%(a)s, 'late@example.com', 'member', '\\x01', now() - interval '1 hour'),"
        " (%(a)s, 'fresh@example.com', 'member', '\\x02', now() + interval '1 hour')",
        {"a": owner.account_id},
    )
    outcome = await run_sweep(standalone_services, registered_sweeps()["invitations"])
    assert (outcome.status, outcome.counts) == ("ok", {"invitations": 1})
    rows = await db.fetch_all(
        "SELECT email, revoked_at IS NOT NULL AS revoked FROM invitations ORDER BY email"
    )
    assert rows == [
        {"email": "fresh@example.com", "revoked": False},
        {"email": "late@example.com", "revoked": True},
    ]


async def test_dedup_sweep_deletes_expired_keys(standalone_services: Domains, db: Database) -> None:
    await db.execute(
        "INSERT INTO notification_dedup (dedup_key, expires_at)"
        " SELECT 'old' || g, now() - interval '1 s' FROM generate_series(1, 30) g"
    )
    await db.execute(
        "INSERT INTO notification_dedup (dedup_key, expires_at) VALUES"
        " ('live', now() + interval '5 minutes')"
    )
    outcome = await run_sweep(standalone_services, registered_sweeps()["dedup"], batch_size=7)
    assert (outcome.status, outcome.counts) == ("ok", {"notification_dedup": 30})
    assert await db.fetch_val("SELECT dedup_key FROM notification_dedup") == "live"


async def test_jobs_sweep_deletes_finished_jobs_past_retention(
    standalone_services: Domains, db: Database
) -> None:
    await db.execute(
        "INSERT INTO jobs (kind, status, finished_at) VALUES"
        " ('x', 'done', now() - interval '8 days'), ('x', 'failed', now() - interval '8 days'),"
        " ('x', 'done', now() - interval '6 days'), ('x', 'queued', NULL),"
        " ('x', 'running', NULL)"
    )
    dry = await run_sweep(standalone_services, registered_sweeps()["jobs"], dry_run=True)
    assert dry.counts == {"jobs": 2}
    outcome = await run_sweep(standalone_services, registered_sweeps()["jobs"])
    assert (outcome.status, outcome.counts) == ("ok", {"jobs": 2})
    rows = await db.fetch_all("SELECT status FROM jobs ORDER BY status")
    assert [r["status"] for r in rows] == ["done", "queued", "running"]
