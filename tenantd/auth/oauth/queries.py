"""Queries of OAuth sign-in; each takes the connection it is given."""

from __future__ import annotations

import datetime as dt
import uuid

from tenantd.db import Conn, Row
from tenantd.db.fetch import fetch_row

CONSUME_STATE_SQL = """
WITH expired AS (
    DELETE FROM oauth_state_uses WHERE expires_at < now() - interval '1 minute'
)
INSERT INTO oauth_state_uses (jti, expires_at) VALUES (%(jti)s, %(expires)s)
ON CONFLICT (jti) DO NOTHING
RETURNING jti
"""


async def consume_state(conn: Conn, *, jti: uuid.UUID, expires_at: dt.datetime) -> bool:
    """Mark a state cookie used; False when it was used before (a replayed callback)."""
    used = await conn.fetch_val(CONSUME_STATE_SQL, {"jti": jti, "expires": expires_at})
    return used is not None


async def lock_sign_in(conn: Conn, *, provider: str, subject: str, email: str) -> None:
    """Serialise callbacks for one identity and one address (transaction-scoped locks)."""
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('oauth-identity:' || %(p)s"
        " || ':' || %(s)s, 0)), pg_advisory_xact_lock(hashtextextended("
        "'user-email:' || lower(%(e)s), 0))",
        {"p": provider, "s": subject, "e": email},
    )


# One round trip: who holds this identity, who holds this address, and whether that user
# already links another identity at the same provider.
SIGN_IN_LOOKUP_SQL = """
SELECT (SELECT i.user_id FROM user_identities i
         WHERE i.provider = %(p)s AND i.subject = %(s)s) AS identity_user_id,
       u.id AS email_user_id,
       u.email_verified_at,
       EXISTS (SELECT 1 FROM user_identities j
                WHERE j.user_id = u.id AND j.provider = %(p)s) AS email_user_has_provider
  FROM (SELECT 1) AS one
  LEFT JOIN users u ON lower(u.email) = lower(%(e)s)
"""


async def sign_in_lookup(conn: Conn, *, provider: str, subject: str, email: str) -> Row:
    return await fetch_row(conn, SIGN_IN_LOOKUP_SQL, {"p": provider, "s": subject, "e": email})


async def refresh_identity_email(conn: Conn, *, provider: str, subject: str, email: str) -> None:
    await conn.execute(
        "UPDATE user_identities SET email = %(e)s"
        " WHERE provider = %(p)s AND subject = %(s)s AND email IS DISTINCT FROM %(e)s",
        {"p": provider, "s": subject, "e": email},
    )


async def insert_identity(
    conn: Conn, *, user_id: uuid.UUID, provider: str, subject: str, email: str
) -> None:
    await conn.execute(
        "INSERT INTO user_identities (user_id, provider, subject, email)"
        " VALUES (%(u)s, %(p)s, %(s)s, %(e)s)",
        {"u": user_id, "p": provider, "s": subject, "e": email},
    )


UNLINK_SQL = """
WITH target AS (
    SELECT id FROM user_identities WHERE user_id = %(u)s AND provider = %(p)s
), other_login AS (
    SELECT EXISTS (SELECT 1 FROM user_passwords WHERE user_id = %(u)s)
        OR EXISTS (SELECT 1 FROM user_identities WHERE user_id = %(u)s AND provider <> %(p)s)
        AS present
), removed AS (
    DELETE FROM user_identities
     WHERE id IN (SELECT id FROM target) AND (SELECT present FROM other_login)
    RETURNING id
)
SELECT (SELECT count(*) FROM target) AS found, (SELECT count(*) FROM removed) AS removed
"""


async def unlink_identity(conn: Conn, *, user_id: uuid.UUID, provider: str) -> Row:
    """Delete the identity only while another login method remains; report what happened.

    Lock the user row first (the caller does) so two unlinks cannot both see the other.
    """
    return await fetch_row(conn, UNLINK_SQL, {"u": user_id, "p": provider})


async def reauth_target(
    conn: Conn, *, provider: str, subject: str, family_id: uuid.UUID, user_id: uuid.UUID
) -> Row:
    """Step-up through the provider: which user links this identity, and the account of the
    session family's live row when that family of `user_id` still lives (else NULL)."""
    return await fetch_row(
        conn,
        "WITH live AS (SELECT s.account_id FROM sessions s JOIN users u ON u.id = s.user_id"
        " WHERE s.family_id = %(f)s AND s.user_id = %(u)s AND s.revoked_at IS NULL"
        " AND s.rotated_at IS NULL AND s.expires_at > now()"
        " AND (u.tokens_valid_after IS NULL OR s.created_at >= u.tokens_valid_after)"
        " AND NOT EXISTS (SELECT 1 FROM sessions r WHERE r.family_id = s.family_id"
        " AND r.revoked_at IS NOT NULL) LIMIT 1)"
        " SELECT (SELECT i.user_id FROM user_identities i WHERE i.provider = %(p)s"
        " AND i.subject = %(s)s) AS identity_user_id,"
        " (SELECT account_id FROM live) AS account_id,"
        " EXISTS (SELECT 1 FROM live) AS session_live",
        {"p": provider, "s": subject, "f": family_id, "u": user_id},
    )
