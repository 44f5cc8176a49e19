"""Queries of identity (users, credentials, tokens, sessions and the session-time view of
memberships); each takes the connection it is given."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence

from sqlalchemy import exists, func, select

from tenantd.db import Conn, Row, tables
from tenantd.db.core import Prepared
from tenantd.db.fetch import fetch_column, fetch_row
from tenantd.db.predicates import affected
from tenantd.ops.queries import COUNTING_CTES, Purge

# The one predicate of an active role, kept by every session-time check (guard, refresh,
# account switch, the account a sign-in lands in): the membership is not revoked and its
# account is not soft-deleted. Callers append `AND ...` for the user and the account.
# RFC 8176 methods that are a second factor: a TOTP or recovery code, a passkey. An account
# requiring MFA serves only sessions whose amr holds one (issue 25 item 16).
FACTOR_AMR = ("otp", "hwk")

ACTIVE_MEMBERSHIPS = (
    "memberships m JOIN accounts a ON a.id = m.account_id"
    " WHERE m.revoked_at IS NULL AND a.deleted_at IS NULL"
)

TOKEN_STATE = Prepared(
    "tenantd_token_state",
    f"""
SELECT u.tokens_valid_after,
       EXISTS (SELECT 1 FROM revoked_tokens r WHERE r.jti = %(jti)s)
       OR EXISTS (SELECT 1 FROM sessions s
                   WHERE s.family_id = %(sid)s AND s.revoked_at IS NOT NULL) AS revoked,
       ma.role, COALESCE(ma.require_mfa, false) AS require_mfa, ma.role_permissions
  FROM users u
  LEFT JOIN LATERAL (SELECT m.role, a.require_mfa,
                            (SELECT r.permissions FROM account_roles r
                              WHERE r.account_id = m.account_id AND r.key = m.role)
                              AS role_permissions
                       FROM {ACTIVE_MEMBERSHIPS}
                        AND m.user_id = u.id AND m.account_id = %(aid)s) ma ON true
 WHERE u.id = %(uid)s
""",
)


async def token_state(
    conn: Conn,
    *,
    user_id: uuid.UUID,
    jti: uuid.UUID,
    account_id: uuid.UUID | None,
    session_id: uuid.UUID | None = None,
) -> Row | None:
    """User cutoff, jti or session revocation, the role in the token's account and whether
    that account requires a second factor (`require_mfa`), in one round trip. A session
    family with a revoked row is ended as a whole (logout, reuse)."""
    return await conn.fetch_one(
        TOKEN_STATE, {"uid": user_id, "jti": jti, "aid": account_id, "sid": session_id}
    )


# What the in-process mirror of revocations (tenantd/identity/revoked.py) is loaded from:
# the same rows the token-state statement consults. Revoked jtis a while past their expiry
# are left out (the token's own exp refuses it; the margin covers clock skew).
REVOKED_JTIS = "SELECT jti FROM revoked_tokens WHERE expires_at > now() - interval '1 hour'"
ENDED_FAMILIES = "SELECT DISTINCT family_id FROM sessions WHERE revoked_at IS NOT NULL"


async def revocations(conn: Conn) -> tuple[list[uuid.UUID], list[uuid.UUID]]:
    """Every revoked access-token id that may still be presented and every ended family."""
    jtis = await conn.fetch_all(REVOKED_JTIS)
    families = await conn.fetch_all(ENDED_FAMILIES)
    return [row["jti"] for row in jtis], [row["family_id"] for row in families]


async def user_by_id(conn: Conn, user_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one("SELECT * FROM users WHERE id = %(id)s", {"id": user_id})


async def lock_user(conn: Conn, user_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one("SELECT * FROM users WHERE id = %(id)s FOR UPDATE", {"id": user_id})


async def user_by_email(conn: Conn, email: str) -> Row | None:
    """The user, its password and, while unverified, the newest sign-up's pending password."""
    return await conn.fetch_one(
        "SELECT u.*, p.password_hash,"
        " (SELECT t.password_hash FROM user_tokens t WHERE t.user_id = u.id"
        "   AND u.email_verified_at IS NULL AND t.purpose = 'verify_email'"
        "   AND t.expires_at > now() ORDER BY t.created_at DESC LIMIT 1) AS pending_password_hash"
        " FROM users u LEFT JOIN user_passwords p ON p.user_id = u.id"
        " WHERE lower(u.email) = lower(%(email)s)",
        {"email": email.strip()},
    )


async def insert_session(
    conn: Conn,
    *,
    family_id: uuid.UUID,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    token_hash: bytes,
    expires_at: dt.datetime,
    access_jti: uuid.UUID,
    user_agent: str | None,
    ip: str | None,
    method: str | None = None,
    signed_in_at: dt.datetime | None = None,
) -> None:
    """A session row; a family's first row is signed in now, a successor keeps the family's
    sign-in time and method."""
    await conn.execute(
        "INSERT INTO sessions (family_id, user_id, account_id, token_hash, expires_at,"
        " access_jti, user_agent, ip, method, signed_in_at) VALUES (%(family)s, %(user)s,"
        " %(account)s, %(hash)s, %(expires)s, %(jti)s, %(ua)s, %(ip)s, %(method)s,"
        " COALESCE(%(signed_in_at)s, now()))",
        {
            "method": method,
            "signed_in_at": signed_in_at,
            "family": family_id,
            "user": user_id,
            "account": account_id,
            "hash": token_hash,
            "expires": expires_at,
            "jti": access_jti,
            "ua": (user_agent or "")[:512] or None,
            "ip": ip,
        },
    )


async def insert_session_auth(
    conn: Conn,
    *,
    family_id: uuid.UUID,
    user_id: uuid.UUID,
    amr: list[str],
    auth_time: dt.datetime,
    act: str | None = None,
) -> None:
    await conn.execute(
        "INSERT INTO session_auth (family_id, user_id, amr, auth_time, act)"
        " VALUES (%(f)s, %(u)s, %(amr)s, %(t)s, %(act)s)",
        {"f": family_id, "u": user_id, "amr": amr, "t": auth_time, "act": act},
    )


async def mark_signed_in(conn: Conn, user_id: uuid.UUID) -> dt.datetime | None:
    """A sign-in of the user starts now: its last sign-in is now; answers when an operator
    disabled the user (None: not disabled)."""
    value: dt.datetime | None = await conn.fetch_val(
        "UPDATE users SET last_sign_in_at = now() WHERE id = %(u)s RETURNING disabled_at",
        {"u": user_id},
    )
    return value


async def user_disabled_at(conn: Conn, user_id: uuid.UUID) -> dt.datetime | None:
    value: dt.datetime | None = await conn.fetch_val(
        "SELECT disabled_at FROM users WHERE id = %(u)s", {"u": user_id}
    )
    return value


async def session_auth(conn: Conn, family_id: uuid.UUID) -> Row | None:
    """How a session family signed in (amr) and when it last proved it (auth_time)."""
    return await conn.fetch_one(
        "SELECT amr, auth_time FROM session_auth WHERE family_id = %(f)s", {"f": family_id}
    )


async def refresh_auth_time(
    conn: Conn, *, family_id: uuid.UUID, user_id: uuid.UUID, amr: list[str]
) -> Row:
    """Step-up: the family proved itself again now (`amr` adds the method used)."""
    return await fetch_row(
        conn,
        "INSERT INTO session_auth (family_id, user_id, amr, auth_time)"
        " VALUES (%(f)s, %(u)s, %(amr)s, now())"
        " ON CONFLICT (family_id) DO UPDATE SET auth_time = now(),"
        " amr = ARRAY(SELECT m FROM unnest(session_auth.amr || EXCLUDED.amr) WITH ORDINALITY"
        " AS t(m, n) GROUP BY m ORDER BY min(n))"
        " WHERE session_auth.user_id = EXCLUDED.user_id"
        " RETURNING amr, auth_time, act",
        {"f": family_id, "u": user_id, "amr": amr},
    )


# A session row with what renewing it depends on: the user's cutoff, whether its family was
# ended (any revoked row ends the family), and how long ago it was rotated out (by the
# database clock, like rotated_at itself; the wall clock, as now() is when the transaction
# began, maybe before a concurrent rotation it waited for).
_SESSION_STATE = (
    "SELECT s.*, u.tokens_valid_after, u.disabled_at AS user_disabled_at,"
    " clock_timestamp() - s.rotated_at AS since_rotated,"
    " u.mfa_enabled, (SELECT ra.require_mfa FROM accounts ra WHERE ra.id = s.account_id)"
    " AS account_requires_mfa,"
    " EXISTS (SELECT 1 FROM session_auth sa WHERE sa.family_id = s.family_id"
    " AND sa.amr && %(factors)s::text[]) AS used_factor,"
    " EXISTS (SELECT 1 FROM sessions f WHERE f.family_id = s.family_id"
    " AND f.revoked_at IS NOT NULL) AS family_revoked"
    " FROM sessions s JOIN users u ON u.id = s.user_id WHERE s.token_hash = %(hash)s"
)


async def lock_session_by_hash(conn: Conn, token_hash: bytes) -> Row | None:
    return await conn.fetch_one(
        _SESSION_STATE + " FOR UPDATE OF s", {"hash": token_hash, "factors": list(FACTOR_AMR)}
    )


async def session_by_hash(conn: Conn, token_hash: bytes) -> Row | None:
    return await conn.fetch_one(_SESSION_STATE, {"hash": token_hash, "factors": list(FACTOR_AMR)})


async def session_family(conn: Conn, token_hash: bytes) -> uuid.UUID | None:
    return await conn.fetch_val(
        "SELECT family_id FROM sessions WHERE token_hash = %(h)s", {"h": token_hash}
    )


async def retire_session(conn: Conn, *, session_id: uuid.UUID, family_id: uuid.UUID) -> None:
    """Mark a session rotated out; drop the family's rows rotated out before it.

    The row replaced last stays for the reuse interval. Rows another transaction holds (a
    repeat of their rotation in progress) are skipped: the next rotation takes them.
    """
    await conn.execute(
        "UPDATE sessions SET rotated_at = now() WHERE id = %(id)s", {"id": session_id}
    )
    await conn.execute(
        "DELETE FROM sessions WHERE id IN (SELECT id FROM sessions WHERE family_id = %(f)s"
        " AND id <> %(id)s AND rotated_at IS NOT NULL AND revoked_at IS NULL"
        " FOR UPDATE SKIP LOCKED)",
        {"f": family_id, "id": session_id},
    )


async def revoke_family(conn: Conn, family_id: uuid.UUID) -> uuid.UUID | None:
    """End a session family; its user when a row was still unrevoked, else None."""
    user_id: uuid.UUID | None = await conn.fetch_val(
        "UPDATE sessions SET revoked_at = now() WHERE family_id = %(f)s AND revoked_at IS NULL"
        " RETURNING user_id",
        {"f": family_id},
    )
    return user_id


async def revoke_jti(
    conn: Conn, *, jti: uuid.UUID, user_id: uuid.UUID, expires_at: dt.datetime
) -> None:
    await conn.execute(
        "INSERT INTO revoked_tokens (jti, user_id, expires_at) VALUES (%(jti)s, %(u)s, %(e)s)"
        " ON CONFLICT (jti) DO NOTHING",
        {"jti": jti, "u": user_id, "e": expires_at},
    )


async def move_session(
    conn: Conn,
    *,
    token_hash: bytes,
    user_id: uuid.UUID,
    account_id: uuid.UUID | None,
    access_jti: uuid.UUID,
) -> uuid.UUID | None:
    """Point the caller's live refresh session at another account; its family, or None."""
    family_id: uuid.UUID | None = await conn.fetch_val(
        "UPDATE sessions SET account_id = %(a)s, access_jti = %(jti)s"
        " WHERE token_hash = %(h)s AND user_id = %(u)s AND revoked_at IS NULL"
        " AND rotated_at IS NULL AND expires_at > now() RETURNING family_id",
        {"a": account_id, "jti": access_jti, "h": token_hash, "u": user_id},
    )
    return family_id


# -- the sessions a user can see and end -----------------------------------------------------

# One row per live family: its live row (not rotated out, not revoked, not expired), in a
# family with no revoked row, created after the user's cutoff. Newest use first.
LIVE_SESSIONS = Prepared(
    "tenantd_live_sessions",
    """
SELECT s.family_id AS id, COALESCE(s.signed_in_at, s.created_at) AS created_at,
       s.created_at AS last_used_at, s.ip, s.user_agent, s.method
  FROM sessions s JOIN users u ON u.id = s.user_id
 WHERE s.user_id = %(u)s::uuid AND s.revoked_at IS NULL AND s.rotated_at IS NULL
   AND s.expires_at > now()
   AND (u.tokens_valid_after IS NULL OR s.created_at >= u.tokens_valid_after)
   AND NOT EXISTS (SELECT 1 FROM sessions f
                    WHERE f.family_id = s.family_id AND f.revoked_at IS NOT NULL)
 ORDER BY s.created_at DESC, s.family_id
""",
)


async def live_sessions(conn: Conn, user_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(LIVE_SESSIONS, {"u": user_id})


async def revoke_user_family(conn: Conn, *, user_id: uuid.UUID, family_id: uuid.UUID) -> bool:
    """End one live session family of this user; False when it is not a live one of theirs."""
    ended = await conn.fetch_val(
        "WITH live AS (SELECT 1 FROM sessions s JOIN users u ON u.id = s.user_id"
        " WHERE s.family_id = %(f)s AND s.user_id = %(u)s AND s.revoked_at IS NULL"
        " AND s.rotated_at IS NULL AND s.expires_at > now()"
        " AND (u.tokens_valid_after IS NULL OR s.created_at >= u.tokens_valid_after)"
        " AND NOT EXISTS (SELECT 1 FROM sessions f WHERE f.family_id = s.family_id"
        " AND f.revoked_at IS NOT NULL)),"
        " ended AS (UPDATE sessions SET revoked_at = now() WHERE family_id = %(f)s"
        " AND user_id = %(u)s AND revoked_at IS NULL AND EXISTS (SELECT 1 FROM live)"
        " RETURNING 1) SELECT count(*) FROM ended",
        {"f": family_id, "u": user_id},
    )
    return bool(ended)


async def revoke_account_families(
    conn: Conn, *, user_id: uuid.UUID, account_id: uuid.UUID
) -> list[uuid.UUID]:
    """End every session family of the user whose live row points at the account; the
    families ended."""
    return await fetch_column(
        conn,
        "WITH families AS (SELECT DISTINCT family_id FROM sessions WHERE user_id = %(u)s"
        " AND account_id = %(a)s AND revoked_at IS NULL AND rotated_at IS NULL),"
        " ended AS (UPDATE sessions SET revoked_at = now() WHERE user_id = %(u)s"
        " AND revoked_at IS NULL AND family_id IN (SELECT family_id FROM families)"
        " RETURNING family_id) SELECT DISTINCT family_id FROM ended ORDER BY family_id",
        {"u": user_id, "a": account_id},
    )


async def revoke_other_families(conn: Conn, *, user_id: uuid.UUID, keep: uuid.UUID | None) -> int:
    """End every session family of the user but `keep`; how many live families ended."""
    count: int = await conn.fetch_val(
        "WITH ended AS (UPDATE sessions SET revoked_at = now() WHERE user_id = %(u)s"
        " AND revoked_at IS NULL AND family_id IS DISTINCT FROM %(keep)s"
        " RETURNING family_id, rotated_at, expires_at)"
        " SELECT count(DISTINCT family_id) FILTER (WHERE rotated_at IS NULL"
        " AND expires_at > now()) FROM ended",
        {"u": user_id, "keep": keep},
    )
    return count


async def session_sign_in(conn: Conn, family_id: uuid.UUID) -> Row | None:
    """How and from where a family signed in (its oldest row left): the new sign-in mail."""
    return await conn.fetch_one(
        "SELECT COALESCE(s.signed_in_at, s.created_at) AS signed_in_at, s.ip, s.user_agent,"
        " s.method, u.email FROM sessions s JOIN users u ON u.id = s.user_id"
        " WHERE s.family_id = %(f)s ORDER BY s.created_at LIMIT 1",
        {"f": family_id},
    )


async def active_role(conn: Conn, *, user_id: uuid.UUID, account_id: uuid.UUID) -> str | None:
    """The user's role in a live account, None without an active membership. Read fresh: after
    `lock_account` a new statement sees every commit."""
    role: str | None = await conn.fetch_val(
        f"SELECT m.role FROM {ACTIVE_MEMBERSHIPS} AND m.user_id = %(u)s AND m.account_id = %(a)s",
        {"u": user_id, "a": account_id},
    )
    return role


async def active_grant(
    conn: Conn, *, user_id: uuid.UUID, account_id: uuid.UUID
) -> tuple[str | None, tuple[str, ...] | None]:
    """The user's role in a live account and, for a custom role, its permissions: (None,
    None) without an active membership. Read fresh, like `active_role`."""
    row = await conn.fetch_one(
        "SELECT m.role, r.permissions FROM memberships m JOIN accounts a ON a.id = m.account_id"
        " LEFT JOIN account_roles r ON r.account_id = m.account_id AND r.key = m.role"
        " WHERE m.revoked_at IS NULL AND a.deleted_at IS NULL"
        " AND m.user_id = %(u)s AND m.account_id = %(a)s",
        {"u": user_id, "a": account_id},
    )
    if row is None:
        return None, None
    custom = row["permissions"]
    return row["role"], tuple(custom) if custom is not None else None


def used_factor(amr: Sequence[str]) -> bool:
    """Whether a sign-in (its amr) used a second factor."""
    return any(method in FACTOR_AMR for method in amr)


async def default_account_id(
    conn: Conn, user_id: uuid.UUID, *, factor: bool = True
) -> uuid.UUID | None:
    """Where a user lands without a choice (sign-in, after leaving or deleting the active
    account): the owned live account, else the oldest active membership (ties: account id).
    An account requiring MFA is skipped while the user has no factor, or (`factor` False)
    the session used none."""
    account_id: uuid.UUID | None = await conn.fetch_val(
        f"SELECT m.account_id FROM {ACTIVE_MEMBERSHIPS} AND m.user_id = %(u)s"
        " AND (NOT a.require_mfa OR (%(f)s AND EXISTS (SELECT 1 FROM users mu"
        " WHERE mu.id = m.user_id AND mu.mfa_enabled)))"
        " ORDER BY (m.role = 'owner') DESC, m.created_at, m.account_id LIMIT 1",
        {"u": user_id, "f": factor},
    )
    return account_id


# --- sign-up, verification, sign-in and password reset -------------------------------------


async def insert_user(
    conn: Conn, *, email: str, first_name: str, last_name: str, locale: str | None = None
) -> uuid.UUID | None:
    """A new unverified user; None when the address is taken (even by a concurrent sign-up)."""
    return await conn.fetch_val(
        "INSERT INTO users (email, first_name, last_name, locale)"
        " VALUES (%(e)s, %(f)s, %(l)s, %(loc)s)"
        " ON CONFLICT (lower(email)) DO NOTHING RETURNING id",
        {"e": email, "f": first_name, "l": last_name, "loc": locale},
    )


async def lock_user_by_email(conn: Conn, email: str) -> Row | None:
    return await conn.fetch_one(
        "SELECT * FROM users WHERE lower(email) = lower(%(email)s) FOR UPDATE",
        {"email": email.strip()},
    )


async def set_password(conn: Conn, *, user_id: uuid.UUID, password_hash: str) -> None:
    await conn.execute(
        "INSERT INTO user_passwords (user_id, password_hash) VALUES (%(u)s, %(h)s)"
        " ON CONFLICT (user_id) DO UPDATE SET password_hash = EXCLUDED.password_hash,"
        " updated_at = now()",
        {"u": user_id, "h": password_hash},
    )


async def replace_password_hash(conn: Conn, *, user_id: uuid.UUID, old: str, new: str) -> bool:
    """A rehash of the same password: written only while `old` is still the stored hash (a
    password changed meanwhile is never overwritten by the old one's rehash)."""
    return await affected(
        conn,
        "UPDATE user_passwords SET password_hash = %(new)s, updated_at = now()"
        " WHERE user_id = %(u)s AND password_hash = %(old)s",
        {"u": user_id, "old": old, "new": new},
    )


async def password_hash(conn: Conn, user_id: uuid.UUID) -> str | None:
    return await conn.fetch_val(
        "SELECT password_hash FROM user_passwords WHERE user_id = %(u)s", {"u": user_id}
    )


async def has_password(conn: Conn, user_id: uuid.UUID) -> bool:
    return await password_hash(conn, user_id) is not None


async def user_credentials(conn: Conn, user_id: uuid.UUID) -> Row | None:
    """The address and password hash (None: the user has no password yet)."""
    return await conn.fetch_one(
        "SELECT u.email, p.password_hash FROM users u"
        " LEFT JOIN user_passwords p ON p.user_id = u.id WHERE u.id = %(u)s",
        {"u": user_id},
    )


async def insert_user_token(
    conn: Conn,
    *,
    token_hash: bytes,
    user_id: uuid.UUID,
    purpose: str,
    expires_at: dt.datetime,
    password_hash: str | None = None,
    binding_hash: bytes | None = None,
    first_name: str | None = None,
    last_name: str | None = None,
) -> None:
    await conn.execute(
        "INSERT INTO user_tokens (token_hash, user_id, purpose, expires_at, password_hash,"
        " binding_hash, first_name, last_name)"
        " VALUES (%(h)s, %(u)s, %(p)s, %(e)s, %(pw)s, %(b)s, %(f)s, %(l)s)",
        {
            "h": token_hash,
            "u": user_id,
            "p": purpose,
            "e": expires_at,
            "pw": password_hash,
            "b": binding_hash,
            "f": first_name,
            "l": last_name,
        },
    )


async def delete_user_tokens(conn: Conn, *, user_id: uuid.UUID, purpose: str) -> None:
    """Retire every outstanding token of a purpose (rotation, or after one was used)."""
    await conn.execute(
        "DELETE FROM user_tokens WHERE user_id = %(u)s AND purpose = %(p)s",
        {"u": user_id, "p": purpose},
    )


async def latest_registration(conn: Conn, *, user_id: uuid.UUID) -> Row | None:
    """The pending credential (password and binding) and names of the newest outstanding
    link, if any."""
    return await conn.fetch_one(
        "SELECT password_hash, binding_hash, first_name, last_name FROM user_tokens"
        " WHERE user_id = %(u)s"
        " AND purpose = 'verify_email' AND used_at IS NULL AND expires_at > now()"
        " ORDER BY created_at DESC LIMIT 1",
        {"u": user_id},
    )


async def delete_user_token(conn: Conn, *, token_hash: bytes) -> None:
    await conn.execute("DELETE FROM user_tokens WHERE token_hash = %(h)s", {"h": token_hash})


async def user_token(conn: Conn, *, token_hash: bytes, purpose: str) -> Row | None:
    """A token row without a lock (to check a password against it before locking)."""
    return await conn.fetch_one(
        "SELECT * FROM user_tokens WHERE token_hash = %(h)s AND purpose = %(p)s",
        {"h": token_hash, "p": purpose},
    )


async def set_cutoff_to_the_millisecond(conn: Conn, *, user_id: uuid.UUID) -> None:
    """Truncate the user-wide cutoff to the millisecond access tokens carry (`iat`).

    A token issued later in the same transaction then never rounds to before the cutoff.
    """
    await conn.execute(
        "UPDATE users SET tokens_valid_after = date_trunc('milliseconds', tokens_valid_after)"
        " WHERE id = %(u)s",
        {"u": user_id},
    )


async def forget_token_passwords(conn: Conn, *, user_id: uuid.UUID) -> None:
    await conn.execute(
        "UPDATE user_tokens SET password_hash = NULL WHERE user_id = %(u)s"
        " AND purpose = 'verify_email'",
        {"u": user_id},
    )


async def token_owner(conn: Conn, *, token_hash: bytes, purpose: str) -> uuid.UUID | None:
    """Who a token belongs to, without a lock (the user row is locked before the token)."""
    return await conn.fetch_val(
        "SELECT user_id FROM user_tokens WHERE token_hash = %(h)s AND purpose = %(p)s",
        {"h": token_hash, "p": purpose},
    )


async def lock_user_token(conn: Conn, *, token_hash: bytes, purpose: str) -> Row | None:
    return await conn.fetch_one(
        "SELECT * FROM user_tokens WHERE token_hash = %(h)s AND purpose = %(p)s FOR UPDATE",
        {"h": token_hash, "p": purpose},
    )


async def set_names(conn: Conn, *, user_id: uuid.UUID, first_name: str, last_name: str) -> None:
    await conn.execute(
        "UPDATE users SET first_name = %(f)s, last_name = %(l)s, updated_at = now()"
        " WHERE id = %(u)s",
        {"u": user_id, "f": first_name, "l": last_name},
    )


async def mark_email_verified(conn: Conn, user_id: uuid.UUID) -> Row:
    return await fetch_row(
        conn,
        "UPDATE users SET email_verified_at = COALESCE(email_verified_at, now()),"
        " updated_at = now() WHERE id = %(u)s RETURNING *",
        {"u": user_id},
    )


async def account_ref(conn: Conn, account_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one("SELECT id, name FROM accounts WHERE id = %(a)s", {"a": account_id})


# -- browsers a user signed in from (the new sign-in mail) ------------------------------------

REMEMBER_DEVICE = Prepared(
    "tenantd_remember_device",
    """
WITH before AS (
    SELECT EXISTS (SELECT 1 FROM known_devices WHERE user_id = %(u)s::uuid) AS any_known
), seen AS (
    INSERT INTO known_devices (user_id, device_hash, browser, os)
    VALUES (%(u)s::uuid, %(h)s::bytea, %(b)s::text, %(o)s::text)
    ON CONFLICT (user_id, device_hash) DO UPDATE
       SET last_seen_at = now(), browser = EXCLUDED.browser, os = EXCLUDED.os
    RETURNING (xmax = 0) AS inserted
)
SELECT seen.inserted, before.any_known,
       (SELECT email FROM users WHERE id = %(u)s::uuid) AS email
  FROM seen, before
""",
)


async def remember_device(
    conn: Conn, *, user_id: uuid.UUID, device_hash: bytes, browser: str | None, os: str | None
) -> Row:
    """Record a sign-in's browser: {inserted (first time for this user), any_known (the user
    had a browser recorded before), email (the user's address)}."""
    return await fetch_row(
        conn, REMEMBER_DEVICE, {"u": user_id, "h": device_hash, "b": browser, "o": os}
    )


# -- step-up (tenantd/identity/stepup.py): how a user can prove it is them -------------------


async def factor_summary(conn: Conn, user_id: uuid.UUID) -> Row | None:
    """Which factors a user has, how many recovery codes are left, and whether a password."""
    return await conn.fetch_one(
        "SELECT u.mfa_enabled, u.email,"
        " EXISTS (SELECT 1 FROM mfa_totp t WHERE t.user_id = u.id"
        "   AND t.confirmed_at IS NOT NULL) AS totp,"
        " (SELECT count(*) FROM passkeys p WHERE p.user_id = u.id) AS passkeys,"
        " (SELECT count(*) FROM mfa_recovery_codes r WHERE r.user_id = u.id"
        "   AND r.used_at IS NULL) AS recovery_codes,"
        " EXISTS (SELECT 1 FROM user_passwords pw WHERE pw.user_id = u.id) AS password"
        " FROM users u WHERE u.id = %(u)s",
        {"u": user_id},
    )


async def linked_providers(conn: Conn, user_id: uuid.UUID) -> list[str]:
    """The providers the user has an identity at (configured or not)."""
    return await fetch_column(
        conn,
        "SELECT provider FROM user_identities WHERE user_id = %(u)s ORDER BY provider",
        {"u": user_id},
    )


# -- a user's address, for the mails of other packages (accounts, mfa) --


async def user_email(conn: Conn, user_id: uuid.UUID) -> str | None:
    email: str | None = await conn.fetch_val(
        "SELECT email FROM users WHERE id = %(u)s", {"u": user_id}
    )
    return email


# -- writes of users, passwords and links for auth's flows (email change, deletion, undo) --


async def set_user_email(conn: Conn, *, user_id: uuid.UUID, email: str) -> None:
    """The address changes and counts as verified (its owner clicked the link)."""
    await conn.execute(
        "UPDATE users SET email = %(e)s, email_verified_at = now(), updated_at = now()"
        " WHERE id = %(u)s",
        {"e": email, "u": user_id},
    )


async def drop_user_links(conn: Conn, *, user_id: uuid.UUID) -> None:
    """Verification and reset links mailed to the previous address stop working."""
    await conn.execute("DELETE FROM user_tokens WHERE user_id = %(u)s", {"u": user_id})


async def tombstone_user(conn: Conn, user_id: uuid.UUID) -> Row:
    """The address is released at once (kept aside in deleted_email for the grace window)."""
    return await fetch_row(
        conn,
        "UPDATE users SET deleted_email = email, email = 'deleted+' || id::text || '@invalid',"
        " deleted_at = now(), updated_at = now() WHERE id = %(u)s RETURNING deleted_at",
        {"u": user_id},
    )


async def anonymize_users(conn: Conn, user_ids: list[uuid.UUID]) -> None:
    """Names and the kept address cleared; the user's notifications, preferences and
    sessions deleted. The row stays (audit rows and memberships point at its id)."""
    ids = {"ids": user_ids}
    await conn.execute(
        "UPDATE users SET first_name = '', last_name = '', deleted_email = NULL,"
        " anonymized_at = now(), updated_at = now() WHERE id = ANY(%(ids)s)",
        ids,
    )
    for table in (
        "notifications",
        "notification_preferences",
        "notification_frequencies",
        "sessions",
    ):
        await conn.execute(f"DELETE FROM {table} WHERE user_id = ANY(%(ids)s)", ids)


async def drop_password_set_since(conn: Conn, *, user_id: uuid.UUID, since: dt.datetime) -> bool:
    """Remove the password when it was set or changed at or after `since`."""
    return await affected(
        conn,
        "DELETE FROM user_passwords WHERE user_id = %(u)s AND updated_at >= %(t)s",
        {"u": user_id, "t": since},
    )


async def drop_password(conn: Conn, user_id: uuid.UUID) -> bool:
    return await affected(conn, "DELETE FROM user_passwords WHERE user_id = %(u)s", {"u": user_id})


async def untombstone_user(conn: Conn, user_id: uuid.UUID) -> bool:
    """A deleted, not yet anonymised user back at its kept address (unless it was taken)."""
    return await affected(
        conn,
        "UPDATE users u SET email = u.deleted_email, deleted_email = NULL, deleted_at = NULL,"
        " updated_at = now() WHERE u.id = %(u)s AND u.deleted_at IS NOT NULL"
        " AND u.anonymized_at IS NULL AND u.deleted_email IS NOT NULL"
        " AND NOT EXISTS (SELECT 1 FROM users o WHERE lower(o.email) = lower(u.deleted_email))",
        {"u": user_id},
    )


# -- users made or claimed by a provider sign-in (tenantd/auth/oauth/service.py) --


async def insert_verified_user(
    conn: Conn, *, email: str, first_name: str, last_name: str
) -> uuid.UUID:
    user_id: uuid.UUID = await conn.fetch_val(
        "INSERT INTO users (email, first_name, last_name, email_verified_at)"
        " VALUES (%(e)s, %(f)s, %(l)s, now()) RETURNING id",
        {"e": email, "f": first_name, "l": last_name},
    )
    return user_id


async def insert_verified_user_unless_taken(
    conn: Conn, *, email: str, first_name: str, last_name: str
) -> uuid.UUID | None:
    """A new verified user (a directory vouches for the address); None when it is taken."""
    return await conn.fetch_val(
        "INSERT INTO users (email, first_name, last_name, email_verified_at)"
        " VALUES (%(e)s, %(f)s, %(l)s, now())"
        " ON CONFLICT (lower(email)) DO NOTHING RETURNING id",
        {"e": email, "f": first_name, "l": last_name},
    )


async def user_liveness_by_email(conn: Conn, email: str) -> Row | None:
    """The user holding the address: its id and whether it is being deleted."""
    return await conn.fetch_one(
        "SELECT id, deleted_at FROM users WHERE lower(email) = lower(%(e)s)", {"e": email}
    )


# The provider proved the mailbox, the earlier sign-up never did: mark the address verified and
# drop what that unproven sign-up chose (its password, its pending verification links), so a
# stranger who registered the address first cannot sign in to the owner's account later.
CLAIM_UNVERIFIED_SQL = """
WITH verified AS (
    UPDATE users SET email_verified_at = now(), updated_at = now()
     WHERE id = %(u)s AND email_verified_at IS NULL
    RETURNING id
), passwords AS (
    DELETE FROM user_passwords WHERE user_id IN (SELECT id FROM verified)
), links AS (
    DELETE FROM user_tokens
     WHERE user_id IN (SELECT id FROM verified) AND purpose = 'verify_email'
)
SELECT count(*) FROM verified
"""


async def claim_unverified_user(conn: Conn, user_id: uuid.UUID) -> bool:
    return bool(await conn.fetch_val(CLAIM_UNVERIFIED_SQL, {"u": user_id}))


# -- an operator disables a user (tenantd/auth/admin/service.py) --


async def set_disabled(conn: Conn, user_id: uuid.UUID, *, disabled: bool) -> None:
    await conn.execute(
        "UPDATE users SET disabled_at = CASE WHEN %(d)s THEN COALESCE(disabled_at, now()) END,"
        " updated_at = now() WHERE id = %(u)s",
        {"u": user_id, "d": disabled},
    )


# -- users imported from another system (tenantd/auth/transfer/service.py) --


async def insert_imported_user(
    conn: Conn,
    *,
    email: str,
    first_name: str,
    last_name: str,
    verified: bool,
    created_at: dt.datetime | None,
) -> uuid.UUID | None:
    """A new user as exported; None when the address is taken."""
    user_id: uuid.UUID | None = await conn.fetch_val(
        "INSERT INTO users (email, first_name, last_name, email_verified_at, created_at)"
        " VALUES (%(e)s, %(f)s, %(l)s, CASE WHEN %(v)s THEN now() END,"
        " COALESCE(%(c)s, now()))"
        " ON CONFLICT (lower(email)) DO NOTHING RETURNING id",
        {"e": email, "f": first_name, "l": last_name, "v": verified, "c": created_at},
    )
    return user_id


async def fill_names(conn: Conn, user_id: uuid.UUID, *, first: str, last: str) -> bool:
    """Set the names the user has left empty; whether anything changed."""
    return await affected(
        conn,
        "UPDATE users SET first_name = CASE WHEN first_name = '' THEN %(f)s ELSE first_name END,"
        " last_name = CASE WHEN last_name = '' THEN %(l)s ELSE last_name END, updated_at = now()"
        " WHERE id = %(u)s AND ((first_name = '' AND %(f)s <> '')"
        " OR (last_name = '' AND %(l)s <> ''))",
        {"u": user_id, "f": first, "l": last},
    )


# -- the users.mfa_enabled flag, recomputed from MFA's factor rows --


async def sync_mfa_enabled(conn: Conn, user_id: uuid.UUID) -> bool:
    """Recompute users.mfa_enabled from the factor rows (after enabling or removing one)."""
    enabled: bool = await conn.fetch_val(
        "UPDATE users SET mfa_enabled = (EXISTS (SELECT 1 FROM mfa_totp t"
        " WHERE t.user_id = users.id AND t.confirmed_at IS NOT NULL)"
        " OR EXISTS (SELECT 1 FROM passkeys p WHERE p.user_id = users.id)),"
        " updated_at = now() WHERE id = %(u)s RETURNING mfa_enabled",
        {"u": user_id},
    )
    return bool(enabled)


# -- a user's notification settings kept on the users row (tenantd/notifications/quiet.py) --


async def set_quiet_hours(
    conn: Conn,
    *,
    user_id: uuid.UUID,
    time_zone: str | None,
    start: dt.time | None,
    end: dt.time | None,
) -> None:
    await conn.execute(
        "UPDATE users SET time_zone = %(z)s, quiet_hours_start = %(s)s, quiet_hours_end = %(e)s,"
        " updated_at = now() WHERE id = %(u)s",
        {"u": user_id, "z": time_zone, "s": start, "e": end},
    )


async def set_locale(conn: Conn, *, user_id: uuid.UUID, locale: str) -> None:
    await conn.execute(
        "UPDATE users SET locale = %(l)s, updated_at = now() WHERE id = %(u)s",
        {"u": user_id, "l": locale},
    )


async def user_event_row(conn: Conn, user_id: uuid.UUID) -> Row | None:
    """The user as its user.* events carry it, with whether a password login exists."""
    return await conn.fetch_one(
        "SELECT u.*, EXISTS (SELECT 1 FROM user_passwords p WHERE p.user_id = u.id)"
        " AS has_password FROM users u WHERE u.id = %(u)s",
        {"u": user_id},
    )


# Per renewal: lock the presented session while it is renewable (not revoked, rotated or
# expired; its family not ended; created after the user's cutoff; its aid membership active
# and, where the account requires MFA, the user has a factor and the session used one), mark
# it rotated, drop the family's rows rotated out before it (skipping rows a repeat holds),
# insert the successor, return the user. A concurrent second use waits on the lock, re-checks,
# finds it rotated and returns nothing for that row.
_ROTATE = """
WITH req AS (
    SELECT * FROM unnest(%(old)s::bytea[], %(family)s::uuid[], %(new)s::bytea[],
                         %(jti)s::uuid[], %(ua)s::text[], %(ip)s::text[]) WITH ORDINALITY
               AS r(old, family, new, jti, ua, ip, n)
){counting}, old AS (
    SELECT s.id, s.family_id, s.user_id, s.account_id,
           COALESCE(s.signed_in_at, s.created_at) AS signed_in_at, s.method,
           r.new, r.jti, r.ua, r.ip
      FROM req r
      JOIN sessions s ON s.token_hash = r.old AND s.family_id = r.family
      JOIN users u ON u.id = s.user_id
     WHERE s.revoked_at IS NULL AND s.rotated_at IS NULL AND s.expires_at > now()
       AND (u.tokens_valid_after IS NULL OR s.created_at >= u.tokens_valid_after)
       AND NOT EXISTS (SELECT 1 FROM sessions f
                        WHERE f.family_id = s.family_id AND f.revoked_at IS NOT NULL)
       AND (s.account_id IS NULL OR EXISTS (
            SELECT 1 FROM {memberships}
               AND m.user_id = s.user_id AND m.account_id = s.account_id
               AND (NOT a.require_mfa OR (u.mfa_enabled AND EXISTS (
                    SELECT 1 FROM session_auth sa2 WHERE sa2.family_id = s.family_id
                       AND sa2.amr && ARRAY['otp', 'hwk']::text[]))))){allowed}
     ORDER BY s.id
       FOR UPDATE OF s
), rotated AS (
    UPDATE sessions SET rotated_at = now() FROM old WHERE sessions.id = old.id
    RETURNING old.*
), pruned AS (
    DELETE FROM sessions WHERE id IN (
        SELECT p.id FROM sessions p JOIN rotated r ON p.family_id = r.family_id
         WHERE p.id <> r.id AND p.rotated_at IS NOT NULL AND p.revoked_at IS NULL
           FOR UPDATE OF p SKIP LOCKED)
), issued AS (
    INSERT INTO sessions (family_id, user_id, account_id, token_hash, expires_at, access_jti,
                          user_agent, ip, signed_in_at, method)
    SELECT family_id, user_id, account_id, new, %(expires)s::timestamptz, jti, ua, ip,
           signed_in_at, method
      FROM rotated
    RETURNING user_id, account_id, family_id, token_hash
)
SELECT i.token_hash AS new_hash, u.id, u.email, u.first_name, u.last_name,
       u.email_verified_at, i.account_id, sa.amr, sa.auth_time{renewed_columns}
  FROM issued i JOIN users u ON u.id = i.user_id
  LEFT JOIN session_auth sa ON sa.family_id = i.family_id{refusals}
"""


ROTATE = Prepared(
    "tenantd_rotate_sessions",
    _ROTATE.format(
        counting="",
        memberships=ACTIVE_MEMBERSHIPS,
        allowed="",
        renewed_columns="",
        refusals="",
    ),
)


# The same, with the requests' rate-limit counters (RATE_LIMIT_ENABLED) moved first, in the
# same statement: `hit` lists each request's counters (its ordinal `n` in `req`). Every
# counter row moves once, by the number of requests counting it (in key order, as
# `ops.ratelimit.hit` does, so two batches never lock counters in a cycle); request n's count
# is what it would have been had the requests come one by one, in batch order. A request
# over any limit is not renewed: its over-limit counters come back (`limited` = n) instead.
ROTATE_COUNTED = Prepared(
    "tenantd_rotate_sessions_counted",
    _ROTATE.format(
        counting=COUNTING_CTES,
        memberships=ACTIVE_MEMBERSHIPS,
        allowed="\n       AND NOT EXISTS (SELECT 1 FROM over o WHERE o.n = r.n)",
        renewed_columns=(
            ",\n       NULL::bigint AS limited, NULL::text AS limited_key,"
            " NULL::float8 AS start_offset"
        ),
        refusals="""
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, o.n, o.key, o.start_offset
  FROM over o""",
    ),
)


async def cut_off_tokens(conn: Conn, user_id: uuid.UUID) -> None:
    """Every access token of the user issued before now stops being accepted."""
    await conn.execute(
        "UPDATE users SET tokens_valid_after = now(), updated_at = now() WHERE id = %(u)s",
        {"u": user_id},
    )


async def revoke_user_sessions(conn: Conn, user_id: uuid.UUID) -> None:
    """End every live session of the user."""
    await conn.execute(
        "UPDATE sessions SET revoked_at = now() WHERE user_id = %(u)s AND revoked_at IS NULL",
        {"u": user_id},
    )


# -- the session sweep's part (tenantd/identity/sweeps.py) -------------------------------------

DEVICE_KEPT = dt.timedelta(days=400)  # the device_id cookie's lifetime (identity/devices.py)


def expired_session_rows() -> list[Purge]:
    """Sessions past expiry, revoked token ids past the token's own expiry, user tokens a day
    after expiry (the friendlier "expired" answer for late clicks), and browsers unseen for
    longer than their device cookie lives (they have lost the cookie anyway)."""
    now = func.now()
    return [
        (tables.sessions, tables.sessions.c.expires_at < now),
        (tables.revoked_tokens, tables.revoked_tokens.c.expires_at < now),
        (tables.user_tokens, tables.user_tokens.c.expires_at < now - dt.timedelta(days=1)),
        (tables.known_devices, tables.known_devices.c.last_seen_at < now - DEVICE_KEPT),
    ]


def ended_session_auth() -> Purge:
    """Sign-in records (an hour old at least) of families that no longer have a session row."""
    family_alive = exists(
        select(tables.sessions.c.id).where(
            tables.sessions.c.family_id == tables.session_auth.c.family_id
        )
    )
    return (
        tables.session_auth,
        (tables.session_auth.c.created_at < func.now() - dt.timedelta(hours=1)) & ~family_alive,
    )


# -- enforced single sign-on (tenantd/identity/sso_policy.py) -----------------------------------

# The enforced connection binding a user, if any (see the module docstring).
SSO_BINDING = """
SELECT c.id
  FROM users u
  JOIN sso_connection_domains d ON d.domain = split_part(u.email, '@', 2)
  JOIN sso_connections c ON c.id = d.connection_id AND c.enforce
  JOIN accounts a ON a.id = c.account_id AND a.deleted_at IS NULL
 WHERE u.id = %(u)s
   AND (a.claimed_domain = d.domain
        OR EXISTS (SELECT 1 FROM memberships m WHERE m.account_id = a.id
                      AND m.user_id = u.id AND m.revoked_at IS NULL))
"""

# Every live session not started by SSO of the users a connection binds (enforcement on).
END_NON_SSO_SESSIONS = """
WITH bound AS (
  SELECT u.id FROM users u
    JOIN sso_connection_domains d ON d.domain = split_part(u.email, '@', 2)
    JOIN accounts a ON a.id = d.account_id AND a.deleted_at IS NULL
   WHERE d.connection_id = %(c)s
     AND (a.claimed_domain = d.domain
          OR EXISTS (SELECT 1 FROM memberships m WHERE m.account_id = a.id
                        AND m.user_id = u.id AND m.revoked_at IS NULL))
), ended AS (
  UPDATE sessions s SET revoked_at = now()
   WHERE s.user_id IN (SELECT id FROM bound) AND s.revoked_at IS NULL
     AND s.method IS DISTINCT FROM %(m)s
  RETURNING 1
) SELECT count(*) FROM ended
"""
