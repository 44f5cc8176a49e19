"""Statements of the admin portal (sql/0370): links and the sessions they open."""

from __future__ import annotations

import datetime as dt
import uuid

from sqlalchemy import ColumnElement, Table, func, or_

from tenantd.db import Conn, Row, tables
from tenantd.db.fetch import fetch_row

LINK_COLUMNS = (
    "l.id, l.account_id, l.intent, l.created_by, l.created_at, l.expires_at, l.opened_at,"
    " l.session_expires_at"
)


async def insert_link(
    conn: Conn,
    *,
    account_id: uuid.UUID,
    intent: str,
    token_hash: bytes,
    created_by: uuid.UUID | None,
    ttl: dt.timedelta,
) -> Row:
    return await fetch_row(
        conn,
        "INSERT INTO admin_portal_links AS l (account_id, intent, token_hash, created_by,"
        " expires_at) VALUES (%(a)s, %(i)s, %(h)s, %(by)s, now() + %(ttl)s)"
        f" RETURNING {LINK_COLUMNS}",
        {"a": account_id, "i": intent, "h": token_hash, "by": created_by, "ttl": ttl},
    )


async def open_link(
    conn: Conn, *, token_hash: bytes, session_hash: bytes, ttl: dt.timedelta
) -> Row | None:
    """Trade an unopened, unexpired link of a live account for a session (once)."""
    return await conn.fetch_one(
        "UPDATE admin_portal_links AS l SET opened_at = now(), session_hash = %(s)s,"
        " session_expires_at = now() + %(ttl)s"
        " FROM accounts a"
        " WHERE l.token_hash = %(h)s AND l.opened_at IS NULL AND l.expires_at > now()"
        " AND a.id = l.account_id AND a.deleted_at IS NULL"
        f" RETURNING {LINK_COLUMNS}, a.name AS account_name",
        {"h": token_hash, "s": session_hash, "ttl": ttl},
    )


async def session(conn: Conn, *, session_hash: bytes) -> Row | None:
    """The live portal session with this digest (its link, the account's name)."""
    return await conn.fetch_one(
        f"SELECT {LINK_COLUMNS}, a.name AS account_name FROM admin_portal_links l"
        " JOIN accounts a ON a.id = l.account_id AND a.deleted_at IS NULL"
        " WHERE l.session_hash = %(s)s AND l.session_expires_at > now()",
        {"s": session_hash},
    )


def dead_links() -> tuple[Table, ColumnElement[bool]]:
    """Links past their hour that never opened, or whose portal session has ended."""
    links = tables.admin_portal_links
    now = func.now()
    return links, (links.c.expires_at < now) & or_(
        links.c.session_expires_at.is_(None), links.c.session_expires_at < now
    )
