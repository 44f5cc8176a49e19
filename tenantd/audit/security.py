"""Per-user security events: what happened to a user's sign-ins, sessions and credentials.

Written by the flows that cause them, in the same transaction (a rolled-back sign-in leaves
no event). Types: signed_in, signed_out, signed_out_everywhere, password_set,
password_changed, password_reset, session_revoked, other_sessions_revoked,
session_reuse_detected, oauth_linked, oauth_unlinked.
"""

from __future__ import annotations

import uuid
from typing import Any

from tenantd.audit import queries
from tenantd.db import Conn, Row

SIGNED_IN = "signed_in"
SIGNED_OUT = "signed_out"
SIGNED_OUT_EVERYWHERE = "signed_out_everywhere"
PASSWORD_SET = "password_set"
PASSWORD_CHANGED = "password_changed"
PASSWORD_RESET = "password_reset"
SESSION_REVOKED = "session_revoked"
OTHER_SESSIONS_REVOKED = "other_sessions_revoked"
SESSION_REUSE_DETECTED = "session_reuse_detected"
OAUTH_LINKED = "oauth_linked"
OAUTH_UNLINKED = "oauth_unlinked"


async def record(
    conn: Conn,
    *,
    user_id: uuid.UUID,
    kind: str,
    session_id: uuid.UUID | None = None,
    ip: str | None = None,
    user_agent: str | None = None,
    data: dict[str, Any] | None = None,
) -> None:
    """Append one event to the user's security log (in the caller's transaction)."""
    await queries.insert_security_event(
        conn,
        user_id=user_id,
        kind=kind,
        session_id=session_id,
        ip=ip,
        user_agent=user_agent,
        data=data or {},
    )


async def page(
    conn: Conn, *, user_id: uuid.UUID, before_id: int | None, limit: int
) -> tuple[list[Row], int | None]:
    """Newest first; the rows and the id to continue before (None: no more)."""
    rows = await queries.fetch(
        conn, queries.security_page(user_id=user_id, before_id=before_id, limit=limit)
    )
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, (rows[-1]["id"] if more and rows else None)
