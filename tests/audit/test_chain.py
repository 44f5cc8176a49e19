"""The audit chain: every row hashed after its account's previous row (whatever SQL wrote
it), concurrent writers queue instead of forking, append-only, kept by the hard-delete sweep;
`tenantd audit verify` finds altered, removed and reordered rows; `tenantd audit export`."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import uuid
from typing import Any

from tenantd import audit
from tenantd.accounts.sweeps import purge_deleted_accounts
from tenantd.audit import chain
from tenantd.db import Database
from tests.factories import run_tenantd

ZERO = bytes(32)


async def write(db: Database, account_id: uuid.UUID | None, action: str, **data: Any) -> None:
    async with db.transaction() as conn:
        await audit.record(
            conn, account_id=account_id, actor_user_id=None, action=action, data=data
        )


async def rows_of(db: Database, account_id: uuid.UUID) -> list[dict[str, Any]]:
    return await db.fetch_all(
        "SELECT *, data::text AS data_text FROM audit_log WHERE account_id = %(a)s ORDER BY id",
        {"a": account_id},
    )


async def tamper(db: Database, sql: str, params: dict[str, Any]) -> None:
    """What someone with database access might do: the append-only trigger off, then SQL."""
    async with db.transaction() as conn:
        await conn.execute("ALTER TABLE audit_log DISABLE TRIGGER audit_log_append_only")
        await conn.execute(sql, params)
        await conn.execute("ALTER TABLE audit_log ENABLE TRIGGER audit_log_append_only")


async def test_rows_chain_per_account_and_python_recomputes_the_database(
    db: Database,
) -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    await write(db, a, "one", text="naïve\nline", n=1)
    await write(db, b, "other")
    await write(db, a, "two", nested={"z": [1, 2.5, None], "a": "\u00e9\U0001f600"})
    # Any writer chains, raw SQL included, with jsonb the database normalises (1.10, 1e16).
    await db.execute(
        "INSERT INTO audit_log (account_id, action, target, data) VALUES"
        ' (%(a)s, \'raw\', NULL, \'{"x": 1.10, "y": 1e16, "b": true}\')',
        {"a": a},
    )
    rows = await rows_of(db, a)
    assert [r["action"] for r in rows] == ["one", "two", "raw"]
    previous = ZERO
    for row in rows:
        assert bytes(row["prev_hash"]) == previous
        assert chain.row_hash(previous, row) == bytes(row["row_hash"])
        previous = bytes(row["row_hash"])
    [other] = await rows_of(db, b)
    assert bytes(other["prev_hash"]) == ZERO  # a chain of its own
    result = await chain.verify(db)
    assert result.broken is None and result.rows == 4 and len(result.heads) == 2


async def test_concurrent_writers_of_one_account_do_not_fork(db: Database) -> None:
    account = uuid.uuid4()
    await write(db, account, "first")

    async def writer(n: int) -> None:
        async with db.transaction() as conn:
            await audit.record(
                conn, account_id=account, actor_user_id=None, action="concurrent", data={"n": n}
            )
            await asyncio.sleep(0.01)  # hold the transaction open: writers overlap
            await audit.record(
                conn, account_id=account, actor_user_id=None, action="second", data={"n": n}
            )

    await asyncio.gather(*(writer(n) for n in range(12)))
    rows = await rows_of(db, account)
    assert len(rows) == 25
    assert len({bytes(r["prev_hash"]) for r in rows}) == 25  # no two rows share a parent
    # Each transaction's two rows are adjacent: the lock is held to commit.
    for first, second in zip(rows[1::2], rows[2::2], strict=True):
        assert first["data"]["n"] == second["data"]["n"]
    assert (await chain.verify(db, account_id=account)).broken is None


async def test_sweeps_writing_many_accounts_at_once_stay_consistent(db: Database) -> None:
    accounts = [uuid.uuid4() for _ in range(5)]

    async def batch(order: list[uuid.UUID]) -> None:
        async with db.transaction() as conn:
            await audit.record_many(
                conn,
                [audit.AuditEntry(account_id=a, actor_user_id=None, action="bulk") for a in order],
            )

    await asyncio.gather(*(batch(accounts[::step]) for step in (1, -1, 1, -1)))
    result = await chain.verify(db)
    assert result.broken is None and result.rows == 20


async def test_the_log_is_append_only(db: Database) -> None:
    account = uuid.uuid4()
    await write(db, account, "kept")
    for sql in (
        "UPDATE audit_log SET action = 'changed'",
        "DELETE FROM audit_log",
    ):
        try:
            await db.execute(sql)
        except Exception as refused:  # psycopg2 InsufficientPrivilege
            assert "append-only" in str(refused)
        else:
            raise AssertionError(f"{sql} was allowed")
    assert len(await rows_of(db, account)) == 1


async def test_hard_delete_keeps_the_chain(db: Database, factory: Any) -> None:
    user = await factory.user()
    account = user.account_id
    await write(db, account, "renamed")
    await db.execute(
        "UPDATE accounts SET deleted_at = now() - interval '31 days' WHERE id = %(a)s",
        {"a": account},
    )
    assert await purge_deleted_accounts(db) == 1
    assert await db.fetch_val("SELECT count(*) FROM accounts WHERE id = %(a)s", {"a": account}) == 0
    actions = [r["action"] for r in await rows_of(db, account)]
    assert actions[-1] == "account.hard_deleted" and "renamed" in actions
    assert (await chain.verify(db, account_id=account)).broken is None


async def verify_cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    return await run_tenantd(env, "audit", "verify", *args)


async def three_rows(db: Database) -> tuple[uuid.UUID, list[int]]:
    account = uuid.uuid4()
    for n in range(3):
        await write(db, account, f"step{n}", n=n)
    await write(db, uuid.uuid4(), "elsewhere")
    return account, [r["id"] for r in await rows_of(db, account)]


async def test_verify_passes_an_intact_log(db: Database, env: dict[str, str]) -> None:
    account, _ = await three_rows(db)
    code, out, err = await verify_cli(env)
    assert code == 0, err
    assert out.startswith("ok: 4 rows in 2 chains")
    code, out, err = await verify_cli(env, str(account))
    assert code == 0, err
    assert out.startswith("ok: 3 rows in 1 chain\n")
    head = (await rows_of(db, account))[-1]["row_hash"]
    assert f"{account} head {bytes(head).hex()}" in out


async def test_verify_names_an_altered_row(db: Database, env: dict[str, str]) -> None:
    account, ids = await three_rows(db)
    await tamper(db, "UPDATE audit_log SET data = '{\"n\": 99}' WHERE id = %(i)s", {"i": ids[1]})
    code, _, err = await verify_cli(env)
    assert code == 1
    assert f"row {ids[1]} of account {account}" in err and "altered" in err
    # Recomputing that row's own hash only moves the break to the next row.
    await tamper(
        db,
        "UPDATE audit_log SET row_hash = sha256(prev_hash || tenantd_audit_canonical(id,"
        " account_id, actor_user_id, action, target, data, created_at)) WHERE id = %(i)s",
        {"i": ids[1]},
    )
    code, _, err = await verify_cli(env, str(account))
    assert code == 1 and f"row {ids[2]} " in err


async def test_verify_names_the_row_after_a_removed_one(db: Database, env: dict[str, str]) -> None:
    account, ids = await three_rows(db)
    await tamper(db, "DELETE FROM audit_log WHERE id = %(i)s", {"i": ids[1]})
    code, _, err = await verify_cli(env, str(account))
    assert code == 1
    assert f"row {ids[2]} " in err and "removed" in err
    # Removing the first row breaks the start of the chain.
    await tamper(db, "DELETE FROM audit_log WHERE id = %(i)s", {"i": ids[0]})
    code, _, err = await verify_cli(env, str(account))
    assert code == 1 and "first row" in err


async def test_verify_names_reordered_rows(db: Database, env: dict[str, str]) -> None:
    _, ids = await three_rows(db)
    # Swap the first two rows' places (ids): a unique id must be parked on the way.
    for source, destination in ((ids[0], -1), (ids[1], ids[0]), (-1, ids[1])):
        await tamper(
            db, "UPDATE audit_log SET id = %(d)s WHERE id = %(s)s", {"s": source, "d": destination}
        )
    code, _, err = await verify_cli(env)
    assert code == 1 and f"row {ids[0]} " in err


async def test_export_jsonl_and_csv(db: Database, env: dict[str, str]) -> None:
    account, ids = await three_rows(db)
    code, out, err = await run_tenantd(env, "audit", "export", str(account))
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert [line["id"] for line in lines] == ids  # oldest first
    assert lines[0]["data"] == {"n": 0} and lines[0]["accountId"] == str(account)
    assert lines[0]["prevHash"] == ZERO.hex()
    assert lines[1]["prevHash"] == lines[0]["rowHash"]
    assert set(lines[0]) == {
        "id",
        "accountId",
        "actorUserId",
        "action",
        "target",
        "data",
        "createdAt",
        "prevHash",
        "rowHash",
    }
    assert "exported 3 rows" in err

    code, out, err = await run_tenantd(env, "audit", "export", str(account), "--format", "csv")
    assert code == 0, err
    records = list(csv.DictReader(io.StringIO(out)))
    assert [int(r["id"]) for r in records] == ids
    assert json.loads(records[2]["data"]) == {"n": 2} and records[2]["actorUserId"] == ""

    code, out, _ = await run_tenantd(env, "audit", "export", str(account), "--since", "2999-01-01")
    assert code == 0 and out == ""
    code, _, err = await run_tenantd(env, "audit", "export", str(uuid.uuid4()))
    assert code == 1 and "no account" in err
    code, _, _ = await run_tenantd(env, "audit", "export", str(account), "--format", "xml")
    assert code == 2


async def test_export_streams_in_batches(db: Database) -> None:
    account = uuid.uuid4()
    async with db.transaction() as conn:
        await audit.record_many(
            conn,
            [
                audit.AuditEntry(account_id=account, actor_user_id=None, action="a", data={"n": n})
                for n in range(25)
            ],
        )
    seen = [
        row["id"] async for row in chain.stream(db, account_id=account, all_accounts=False, batch=4)
    ]
    assert len(seen) == 25 and seen == sorted(seen)
    result = await chain.verify(db, account_id=account, batch=4)
    assert result.broken is None and result.rows == 25
