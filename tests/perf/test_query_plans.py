"""Hot queries stay flat as data grows: on a seeded data set none of them scans a big table
sequentially. The SQL is captured from the real query functions, then EXPLAINed."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from typing import Any

import psycopg2
import pytest

from bench.seed import SeedPlan, account_uuid, seed, user_uuid
from tenantd.accounts.plans import entitlements
from tenantd.accounts.queries import ME
from tenantd.db.core import Prepared, Statement, compile_statement
from tenantd.db.dsn import url_to_dsn
from tenantd.identity import queries as auth_queries
from tenantd.identity.queries import ROTATE
from tenantd.jobs import queries as job_queries
from tenantd.notifications import queries as notification_queries
from tenantd.suppression import service as suppression
from tests.helpers import SECRET

BIG_TABLES = {
    "users",
    "sessions",
    "memberships",
    "accounts",
    "account_plans",
    "notifications",
    "notification_deliveries",
    "email_suppressions",
    "jobs",
    "revoked_tokens",
}

PLAN = SeedPlan(
    users=20_000,
    accounts=4_000,
    memberships=30_000,
    notifications=200_000,
    suppressions=10_000,
    sessions=2_000,
)


class RecordingConn:
    """Stands in for a Conn: records what a query function would send."""

    def __init__(self) -> None:
        self.statements: list[tuple[str, dict[str, Any]]] = []

    def _record(self, stmt: Statement, params: Mapping[str, Any] | None) -> None:
        if isinstance(stmt, Prepared):
            self.statements.append((stmt.sql, dict(params or {})))
            return
        sql, values = compile_statement(stmt, params)
        self.statements.append((sql, values or {}))

    async def fetch_all(
        self, stmt: Statement, params: Mapping[str, Any] | None = None
    ) -> list[Any]:
        self._record(stmt, params)
        return []

    async def fetch_one(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> None:
        self._record(stmt, params)
        return None

    async def fetch_val(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> int:
        self._record(stmt, params)
        return 0

    async def execute(self, stmt: Statement, params: Mapping[str, Any] | None = None) -> int:
        self._record(stmt, params)
        return 0


def seq_scans(plan: dict[str, Any]) -> list[str]:
    found = []
    if plan.get("Node Type") == "Seq Scan" and plan.get("Relation Name") in BIG_TABLES:
        found.append(plan["Relation Name"])
    for child in plan.get("Plans", []):
        found.extend(seq_scans(child))
    return found


@pytest.fixture(scope="module")
def seeded(migrated: str) -> str:
    dsn = url_to_dsn(migrated)
    seed(dsn, PLAN, SECRET, log=lambda *_: None)
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    with conn.cursor() as cur:  # the tables bench.seed leaves empty
        cur.execute(
            "INSERT INTO revoked_tokens (jti, user_id, expires_at)"
            " SELECT gen_random_uuid(), gen_random_uuid(), now() + interval '10 minutes'"
            " FROM generate_series(1, 20000);"
            " INSERT INTO jobs (kind, payload, status, run_at, finished_at)"
            " SELECT 'notification.dispatch', '{}',"
            "        CASE WHEN i % 50 = 0 THEN 'queued' ELSE 'done' END,"
            "        now() - (i || ' seconds')::interval,"
            "        CASE WHEN i % 50 = 0 THEN NULL ELSE now() END"
            " FROM generate_series(1, 50000) i;"
            " ANALYZE revoked_tokens; ANALYZE jobs;"
        )
    conn.close()
    return dsn


async def hot_statements() -> dict[str, tuple[str, dict[str, Any]]]:
    user = uuid.UUID(user_uuid(17))
    account = uuid.UUID(account_uuid(17))
    recorded: dict[str, tuple[str, dict[str, Any]]] = {}

    async def capture(name: str, call: Any) -> None:
        conn = RecordingConn()
        await call(conn)
        for index, statement in enumerate(conn.statements):
            recorded[f"{name}#{index}"] = statement

    await capture(
        "token_state",
        lambda c: auth_queries.token_state(
            c, user_id=user, jti=uuid.uuid4(), account_id=account, session_id=uuid.uuid4()
        ),
    )
    recorded["me"] = (ME.sql, {"uid": user, "aid": account})
    recorded["refresh"] = (
        ROTATE.sql,
        {
            "old": [b"x" * 32, b"z" * 32],
            "family": [uuid.uuid4(), uuid.uuid4()],
            "new": [b"y" * 32, b"w" * 32],
            "expires": dt.datetime.now(dt.UTC),
            "jti": [uuid.uuid4(), uuid.uuid4()],
            "ua": [None, None],
            "ip": [None, None],
        },
    )
    await capture("entitlements", lambda c: entitlements(c, account))
    await capture("suppression", lambda c: suppression.find(c, "someone@example.com"))
    for (status, after), query in notification_queries.INBOX_PAGES.items():
        params: dict[str, Any] = {"uid": user, "size": 50, "fetch": 51}
        if after:
            params.update(c=dt.datetime.now(dt.UTC), i=uuid.uuid4())
        recorded[f"inbox_{status}_{'next' if after else 'first'}"] = (query.sql, params)
    await capture("unread_count", lambda c: notification_queries.unread_count(c, user_id=user))
    await capture(
        "claim_jobs",
        lambda c: job_queries.claim_jobs(
            c, kinds=["notification.dispatch"], worker="w", limit=32, lease_seconds=30
        ),
    )
    # Every runner of every instance runs it twice a second.
    await capture("requeue_expired_jobs", lambda c: job_queries.requeue_expired(c))
    return recorded


async def test_hot_queries_use_indexes_on_a_seeded_data_set(seeded: str) -> None:
    statements = await hot_statements()
    assert len(statements) >= 10
    conn = psycopg2.connect(seeded)
    psycopg2.extras.register_uuid()
    failures = {}
    try:
        with conn.cursor() as cur:
            for name, (sql, params) in statements.items():
                # A statement sent with its planner settings (SET LOCAL ...; the claim):
                # those apply to it alone (a savepoint undoes them), the last one explained.
                cur.execute("SAVEPOINT plan")
                if sql.startswith("SET LOCAL"):
                    settings, _, sql = sql.rpartition(";")
                    cur.execute(settings)
                cur.execute("EXPLAIN (FORMAT JSON) " + sql, params or None)
                plan = cur.fetchone()[0][0]["Plan"]
                cur.execute("ROLLBACK TO SAVEPOINT plan")
                scans = seq_scans(plan)
                if scans:
                    failures[name] = scans
        conn.rollback()
    finally:
        conn.close()
    assert failures == {}, f"sequential scans on big tables: {failures}"
