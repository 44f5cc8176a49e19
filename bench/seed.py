"""Seed a realistic data set fast, in SQL (generate_series), scaled by --scale."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import time
import uuid
from dataclasses import dataclass

import psycopg2
import psycopg2.errors
from argon2 import PasswordHasher

from tenantd.identity.tokens import successor_refresh_token

BASE = {
    "users": 100_000,
    "accounts": 20_000,
    "memberships": 150_000,
    "notifications": 1_000_000,
    "suppressions": 50_000,
    "sessions": 60_000,
}


@dataclass(frozen=True)
class SeedPlan:
    users: int
    accounts: int
    memberships: int
    notifications: int
    suppressions: int
    sessions: int

    @classmethod
    def scaled(cls, scale: float) -> SeedPlan:
        counts = {k: max(10, int(v * scale)) for k, v in BASE.items()}
        counts["accounts"] = min(counts["accounts"], counts["users"])
        counts["sessions"] = max(counts["sessions"], 60_000)  # refresh needs one token per request
        return cls(**counts)


def family_uuid(i: int) -> str:
    return f"00000000-0000-4000-a000-{i:012x}"


def refresh_token(secret: str, i: int) -> str:
    """Session i's refresh token, in the form that names its family (the fast refresh path)."""
    return successor_refresh_token(secret, f"bench-refresh-{i:09d}", uuid.UUID(family_uuid(i)))


def token_hash(secret: str, token: str) -> bytes:
    return hmac.new(secret.encode(), token.encode(), hashlib.sha256).digest()


def user_id_sql(expr: str) -> str:
    """Deterministic UUID for user number `expr`, so the bench can mint tokens for it."""
    return f"('00000000-0000-4000-8000-' || lpad(to_hex({expr}), 12, '0'))::uuid"


def account_id_sql(expr: str) -> str:
    return f"('00000000-0000-4000-9000-' || lpad(to_hex({expr}), 12, '0'))::uuid"


def user_uuid(i: int) -> str:
    return f"00000000-0000-4000-8000-{i:012x}"


def account_uuid(i: int) -> str:
    return f"00000000-0000-4000-9000-{i:012x}"


def seed(dsn: str, plan: SeedPlan, secret: str, log: callable = print) -> dict[str, float]:  # type: ignore[valid-type]
    timings: dict[str, float] = {}
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    cur = conn.cursor()
    # Bulk loading: skip the cache-invalidation triggers (no server is running yet, and a
    # per-row announcement of millions of rows is pure overhead). Needs a superuser, which
    # the bench's private cluster provides.
    # (An ordinary user seeds with the triggers on: slower, same data.)
    with contextlib.suppress(psycopg2.errors.InsufficientPrivilege):
        cur.execute("SET session_replication_role = replica")

    def step(name: str, sql: str, params: object = None) -> None:
        started = time.perf_counter()
        cur.execute(sql, params)
        timings[name] = time.perf_counter() - started
        log(f"  seeded {name} in {timings[name]:.1f}s")

    cur.execute(
        "TRUNCATE users, accounts, memberships, notifications, notification_deliveries,"
        " email_suppressions, sessions, account_plans, jobs, notification_dedup CASCADE"
    )
    # History tables the figures write (provider event ids, outbox events and their webhook
    # deliveries) start empty too: their random-key indexes cost more per insert as they
    # grow, so a data set that had seen more runs measured slower, whatever its scale.
    cur.execute("TRUNCATE webhook_events, outbox_events CASCADE")
    u, a = plan.users, plan.accounts
    step(
        "users",
        f"INSERT INTO users (id, email, first_name, last_name, email_verified_at, created_at)"
        f" SELECT {user_id_sql('i')}, 'user' || i || '@bench' || (i % 997) || '.example',"
        f" 'First' || i, 'Last', now() - interval '30 days', now() - (i || ' seconds')::interval"
        f" FROM generate_series(1, {u}) i",
    )
    step(
        "user_passwords",
        # One precomputed argon2id hash of "benchmark-password" for every user.
        "INSERT INTO user_passwords (user_id, password_hash) SELECT id, %(h)s FROM users",
        {"h": PasswordHasher().hash("benchmark-password")},
    )
    step(
        "accounts",
        f"INSERT INTO accounts (id, name) SELECT {account_id_sql('i')}, 'Account ' || i"
        f" FROM generate_series(1, {a}) i",
    )
    step(
        "account_plans",
        "INSERT INTO account_plans (account_id, plan_code)"
        " SELECT id, (ARRAY['free','team','business'])[1 + (hashtext(id::text) & 1023) % 3]"
        " FROM accounts",
    )
    # Owners: user i owns account i. Further memberships: user j joins account (j % a) + 1.
    extra = max(0, plan.memberships - a)
    step(
        "memberships",
        f"INSERT INTO memberships (account_id, user_id, role)"
        f" SELECT {account_id_sql('i')}, {user_id_sql('i')}, 'owner'"
        f" FROM generate_series(1, {a}) i;"
        f" INSERT INTO memberships (account_id, user_id, role)"
        f" SELECT {account_id_sql('((j::bigint * 7919) % ' + str(a) + ') + 1')},"
        f"        {user_id_sql('((j - 1) % ' + str(u) + ') + 1')},"
        f"        CASE WHEN j % 5 = 0 THEN 'admin' ELSE 'member' END"
        f" FROM generate_series(1, {extra}) j"
        f" ON CONFLICT DO NOTHING",
    )
    step(
        "notifications",
        f"INSERT INTO notifications (user_id, event_type, title, body, cta_url, cta_label,"
        f" status, read_at, created_at)"
        f" SELECT {user_id_sql('((n - 1) % ' + str(u) + ') + 1')}, 'bench.event',"
        f" 'Notification ' || n, 'Something happened', '/things/' || n, 'Open',"
        f" CASE WHEN n % 3 = 0 THEN 'read' ELSE 'unread' END,"
        f" CASE WHEN n % 3 = 0 THEN now() END,"
        f" now() - (n || ' seconds')::interval"
        f" FROM generate_series(1, {plan.notifications}) n",
    )
    # One in-app delivery per notification (1M at --scale 1): the rows /metrics reports.
    step(
        "deliveries",
        "INSERT INTO notification_deliveries (notification_id, channel, status)"
        " SELECT id, 'in_app', 'sent' FROM notifications",
    )
    step(
        "suppressions",
        f"INSERT INTO email_suppressions (email, reason, provider)"
        f" SELECT 'bounced' || i || '@bench.example', 'hard_bounce', 'sendgrid'"
        f" FROM generate_series(1, {plan.suppressions}) i",
    )
    started = time.perf_counter()
    rows = []
    for i in range(1, plan.sessions + 1):
        user_index = ((i - 1) % a) + 1  # owners, so the aid membership is active
        rows.append(
            (
                family_uuid(i),
                user_uuid(user_index),
                account_uuid(user_index),
                psycopg2.Binary(token_hash(secret, refresh_token(secret, i))),
            )
        )
    args = ",".join(
        cur.mogrify("(%s, %s, %s, %s, now() + interval '30 days')", r).decode() for r in rows
    )
    cur.execute(
        "INSERT INTO sessions (family_id, user_id, account_id, token_hash, expires_at) VALUES "
        + args
    )
    timings["sessions"] = time.perf_counter() - started
    log(f"  seeded sessions in {timings['sessions']:.1f}s")
    step("vacuum analyze", "VACUUM ANALYZE")  # settle now, not under the benchmark
    # Likewise write the bulk load out now: otherwise the checkpoint it triggered spreads
    # gigabytes of writes over the next minutes, on the cores the benchmarks share.
    with contextlib.suppress(psycopg2.errors.InsufficientPrivilege):
        step("checkpoint", "CHECKPOINT")
    conn.close()
    return timings
