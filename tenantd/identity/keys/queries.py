"""Queries of signing_keys; each takes the connection it is given. Changes are serialised by
one transaction-level advisory lock (start-up, the sweep and the CLI may race)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from tenantd.db import Conn, Row
from tenantd.db.fetch import fetch_row

# Two-int advisory lock: (this class, 1) guards every change of the key set.
LOCK_CLASS = 735_413
# sql/0100's trigger announces it (a row the relay publishes after commit); each write
# wakes the relay.
CHANNEL = "tenantd_keys"
_COLUMNS = "kid, alg, public_jwk, private_key, published_at, signing_from, retired_at, not_after"


async def lock_keys(conn: Conn) -> None:
    """Serialise key changes until the end of the caller's transaction."""
    await conn.execute("SELECT pg_advisory_xact_lock(%(c)s, 1)", {"c": LOCK_CLASS})


async def _write(conn: Conn, stmt: str, params: dict[str, Any]) -> None:
    """A change of the key set: its statement trigger announces it, so the relay is woken."""
    await conn.execute(stmt, params)
    conn.announced()


async def published_keys(conn: Conn) -> list[Row]:
    """Keys a token may name right now (published, and not past not_after)."""
    return await conn.fetch_all(
        f"SELECT {_COLUMNS} FROM signing_keys"
        " WHERE published_at <= now() AND (not_after IS NULL OR not_after > now())"
        " ORDER BY signing_from"
    )


async def all_keys(conn: Conn) -> list[Row]:
    return await conn.fetch_all(
        f"SELECT {_COLUMNS}, now() AS now FROM signing_keys ORDER BY signing_from, kid"
    )


async def key(conn: Conn, kid: str) -> Row | None:
    return await conn.fetch_one(
        f"SELECT {_COLUMNS}, now() AS now FROM signing_keys WHERE kid = %(k)s", {"k": kid}
    )


async def first_signing_from(conn: Conn) -> dt.datetime | None:
    """When asymmetric signing began (the legacy HS256 window is measured from it)."""
    value: dt.datetime | None = await conn.fetch_val("SELECT min(signing_from) FROM signing_keys")
    return value


async def insert_key(
    conn: Conn,
    *,
    kid: str,
    alg: str,
    public_jwk: dict[str, Any],
    private_key: bytes,
    signing_from: dt.datetime | None,
) -> Row:
    """A new key published now; it signs from `signing_from` (None: now)."""
    row = await fetch_row(
        conn,
        "INSERT INTO signing_keys (kid, alg, public_jwk, private_key, signing_from)"
        " VALUES (%(kid)s, %(alg)s, %(jwk)s::jsonb, %(private)s,"
        "         COALESCE(%(from)s::timestamptz, now()))"
        f" RETURNING {_COLUMNS}, now() AS now",
        {
            "kid": kid,
            "alg": alg,
            "jwk": json.dumps(public_jwk),
            "private": private_key,
            "from": signing_from,
        },
    )
    conn.announced()
    return row


async def schedule_retirement(
    conn: Conn, *, kid: str, retired_at: dt.datetime, lifetime: dt.timedelta
) -> None:
    """`kid` stops signing at `retired_at` and is published until its last token expired."""
    await _write(
        conn,
        "UPDATE signing_keys SET retired_at = %(r)s, not_after = %(r)s::timestamptz + %(l)s"
        " WHERE kid = %(k)s",
        {"k": kid, "r": retired_at, "l": lifetime},
    )


async def cancel_retirement(conn: Conn, *, retired_at: dt.datetime) -> None:
    """A key scheduled to hand over at `retired_at` keeps signing (its successor went)."""
    await _write(
        conn,
        "UPDATE signing_keys SET retired_at = NULL, not_after = NULL"
        " WHERE retired_at = %(r)s AND retired_at > now()",
        {"r": retired_at},
    )


async def withdraw(conn: Conn, kid: str) -> None:
    """Stop signing and publishing `kid` now (a next key that never signed, or --now)."""
    await _write(
        conn,
        "UPDATE signing_keys"
        "   SET signing_from = LEAST(signing_from, now()),"
        "       published_at = LEAST(published_at, now()),"
        "       retired_at = LEAST(COALESCE(retired_at, now()), now()),"
        "       not_after = now(), private_key = NULL"
        " WHERE kid = %(k)s",
        {"k": kid},
    )


async def start_signing_now(conn: Conn, kid: str) -> None:
    await _write(
        conn,
        # Not before its publication: another instance's transaction may have published it
        # a moment after this transaction's now() (signing_from >= published_at is checked).
        "UPDATE signing_keys SET signing_from = GREATEST(now(), published_at)"
        " WHERE kid = %(k)s AND signing_from > now()",
        {"k": kid},
    )


async def wipe_retired_private_keys(conn: Conn) -> int:
    """A retired key signs nothing again: its private part is not kept."""
    count = await conn.execute(
        "UPDATE signing_keys SET private_key = NULL"
        " WHERE retired_at <= now() AND private_key IS NOT NULL"
    )
    if count:
        conn.announced()
    return count


async def delete_expired(conn: Conn, *, older_than: dt.timedelta) -> int:
    count = await conn.execute(
        "DELETE FROM signing_keys WHERE not_after < now() - %(age)s", {"age": older_than}
    )
    if count:
        conn.announced()
    return count


async def db_now(conn: Conn) -> dt.datetime:
    """The database's clock (the one signing_from and retired_at are compared with)."""
    now: dt.datetime = await conn.fetch_val("SELECT now()")
    return now
