"""The rule of an enforced single sign-on connection, kept where sessions start: an address
whose domain belongs to a connection with `enforce` on signs in only through that connection
(403 SSO_REQUIRED for every other way in), and switching enforcement on ends the sessions of
other kinds those users hold.

The connection binds a user when its account has claimed the domain (the domain-claim rules)
or the user is an active member of that account: an account cannot lock out addresses of a
domain it has no hold on.
"""

from __future__ import annotations

import uuid

from tenantd.db import Conn
from tenantd.errors import AppError
from tenantd.identity import queries
from tenantd.identity.errors import SsoRequired

# The `method` of a session started by an SSO connection (GET /api/v1/auth/sessions).
SSO_METHOD = "sso"


async def enforced_connection(conn: Conn, user_id: uuid.UUID) -> uuid.UUID | None:
    """The enforced SSO connection that alone may sign this user in, or None."""
    found: uuid.UUID | None = await conn.fetch_val(queries.SSO_BINDING, {"u": user_id})
    return found


def sso_required(connection_id: uuid.UUID) -> AppError:
    return SsoRequired(
        details={
            "connectionId": str(connection_id),
            "startUrl": f"/sso/start?connection={connection_id}",
        }
    )


async def refuse_unless_sso(conn: Conn, *, user_id: uuid.UUID, method: str | None) -> None:
    """403 SSO_REQUIRED when an enforced connection binds the user and this sign-in is not
    one of SSO."""
    if method == SSO_METHOD:
        return
    connection_id = await enforced_connection(conn, user_id)
    if connection_id is not None:
        raise sso_required(connection_id)


async def end_other_sessions(conn: Conn, connection_id: uuid.UUID) -> int:
    """End every live session not started by SSO of the users the connection binds (its
    enforcement was just switched on); how many session rows ended."""
    count: int = await conn.fetch_val(
        queries.END_NON_SSO_SESSIONS,
        {"c": connection_id, "m": SSO_METHOD},
    )
    return count
