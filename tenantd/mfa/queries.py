"""Queries of multi-factor authentication (factors, codes, tickets, challenges, lockouts);
each takes the connection it is given. Lock order: the user row first, then factor rows."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from typing import Any

from psycopg2.extras import Json
from sqlalchemy import func

from tenantd.db import Conn, Row
from tenantd.db.fetch import fetch_column
from tenantd.db.predicates import affected
from tenantd.db.tables import (
    mfa_tickets,
    security_undo,
    webauthn_challenges,
)
from tenantd.identity.queries import user_email as user_email
from tenantd.ops.queries import Purge

# -- factors of a user ------------------------------------------------------------------------


async def lock_user(conn: Conn, user_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one(
        "SELECT id, email, mfa_enabled FROM users WHERE id = %(u)s FOR UPDATE", {"u": user_id}
    )


# -- TOTP -------------------------------------------------------------------------------------


async def totp(conn: Conn, user_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one("SELECT * FROM mfa_totp WHERE user_id = %(u)s", {"u": user_id})


async def put_pending_totp(conn: Conn, *, user_id: uuid.UUID, secret: bytes) -> None:
    """A new unconfirmed secret (replacing an unconfirmed one; never a confirmed one)."""
    await conn.execute(
        "INSERT INTO mfa_totp (user_id, secret_encrypted) VALUES (%(u)s, %(s)s)"
        " ON CONFLICT (user_id) DO UPDATE SET secret_encrypted = EXCLUDED.secret_encrypted,"
        " created_at = now(), last_used_step = NULL WHERE mfa_totp.confirmed_at IS NULL",
        {"u": user_id, "s": secret},
    )


async def confirm_totp(conn: Conn, *, user_id: uuid.UUID, step: int) -> bool:
    return await affected(
        conn,
        "UPDATE mfa_totp SET confirmed_at = now(), last_used_step = %(s)s"
        " WHERE user_id = %(u)s AND confirmed_at IS NULL",
        {"u": user_id, "s": step},
    )


async def use_totp_step(conn: Conn, *, user_id: uuid.UUID, step: int) -> bool:
    """Accept a code of `step` once: only when it is newer than the last accepted one.

    One atomic statement, so two instances given the same code cannot both accept it.
    """
    return await affected(
        conn,
        "UPDATE mfa_totp SET last_used_step = %(s)s WHERE user_id = %(u)s"
        " AND confirmed_at IS NOT NULL"
        " AND (last_used_step IS NULL OR last_used_step < %(s)s)",
        {"u": user_id, "s": step},
    )


async def delete_factors_since(conn: Conn, *, user_id: uuid.UUID, since: dt.datetime) -> int:
    """Remove the authenticator app and the passkeys added at or after `since`; how many."""
    totp = await conn.fetch_all(
        "DELETE FROM mfa_totp WHERE user_id = %(u)s AND created_at >= %(t)s RETURNING 1",
        {"u": user_id, "t": since},
    )
    keys = await conn.fetch_all(
        "DELETE FROM passkeys WHERE user_id = %(u)s AND created_at >= %(t)s RETURNING 1",
        {"u": user_id, "t": since},
    )
    return len(totp) + len(keys)


async def delete_totp(conn: Conn, user_id: uuid.UUID) -> bool:
    return await affected(conn, "DELETE FROM mfa_totp WHERE user_id = %(u)s", {"u": user_id})


# -- wrong-code lockout -----------------------------------------------------------------------


async def lock_failures(conn: Conn, user_id: uuid.UUID) -> dt.datetime | None:
    """Lock the user's wrong-code row (created when missing) for one check: checks of the
    same user wait here, so a lock set by one is seen by the next (issue 25 item 9). The
    end of a current lock, or None."""
    await conn.execute(
        "INSERT INTO mfa_failures (user_id, window_start, failures) VALUES (%(u)s, now(), 0)"
        " ON CONFLICT (user_id) DO NOTHING",
        {"u": user_id},
    )
    value: dt.datetime | None = await conn.fetch_val(
        "SELECT CASE WHEN locked_until > clock_timestamp() THEN locked_until END"
        " FROM mfa_failures WHERE user_id = %(u)s FOR UPDATE",
        {"u": user_id},
    )
    return value


async def locked_until(conn: Conn, user_id: uuid.UUID) -> dt.datetime | None:
    value: dt.datetime | None = await conn.fetch_val(
        "SELECT locked_until FROM mfa_failures WHERE user_id = %(u)s AND locked_until > now()",
        {"u": user_id},
    )
    return value


async def record_failure(
    conn: Conn, *, user_id: uuid.UUID, limit: int, window_seconds: int, lock_seconds: int
) -> dt.datetime | None:
    """Count one wrong code (one atomic upsert, so every instance counts in one place);
    the `limit`-th inside the window locks the codes. Returns the lock's end when locked."""
    value: dt.datetime | None = await conn.fetch_val(
        """
INSERT INTO mfa_failures AS f (user_id, window_start, failures)
VALUES (%(u)s, now(), 1)
ON CONFLICT (user_id) DO UPDATE SET
    window_start = CASE WHEN f.window_start <= now() - make_interval(secs => %(w)s)
                        THEN now() ELSE f.window_start END,
    failures = CASE WHEN f.window_start <= now() - make_interval(secs => %(w)s)
                    THEN 1 ELSE f.failures + 1 END
RETURNING user_id
""",
        {"u": user_id, "w": window_seconds},
    )
    assert value is not None
    return await conn.fetch_val(
        "UPDATE mfa_failures SET locked_until = now() + make_interval(secs => %(l)s),"
        " failures = 0, window_start = now()"
        " WHERE user_id = %(u)s AND failures >= %(n)s RETURNING locked_until",
        {"u": user_id, "n": limit, "l": lock_seconds},
    )


async def clear_failures(conn: Conn, user_id: uuid.UUID) -> None:
    await conn.execute(
        "UPDATE mfa_failures SET failures = 0 WHERE user_id = %(u)s AND failures > 0",
        {"u": user_id},
    )


# -- recovery codes ---------------------------------------------------------------------------


async def replace_recovery_codes(
    conn: Conn, *, user_id: uuid.UUID, hashes: Sequence[bytes]
) -> None:
    await delete_recovery_codes(conn, user_id)
    for code_hash in hashes:
        await conn.execute(
            "INSERT INTO mfa_recovery_codes (user_id, code_hash) VALUES (%(u)s, %(h)s)",
            {"u": user_id, "h": code_hash},
        )


async def use_recovery_code(conn: Conn, *, user_id: uuid.UUID, code_hash: bytes) -> bool:
    """Spend a code once (atomic: two uses at once, one wins)."""
    return await affected(
        conn,
        "UPDATE mfa_recovery_codes SET used_at = now() WHERE user_id = %(u)s"
        " AND code_hash = %(h)s AND used_at IS NULL",
        {"u": user_id, "h": code_hash},
    )


async def delete_recovery_codes(conn: Conn, user_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM mfa_recovery_codes WHERE user_id = %(u)s", {"u": user_id})


# -- sign-in tickets --------------------------------------------------------------------------


async def insert_ticket(
    conn: Conn,
    *,
    token_hash: bytes,
    binding_hash: bytes,
    user_id: uuid.UUID,
    amr: list[str],
    return_to: str | None,
    expires_at: dt.datetime,
) -> uuid.UUID:
    ticket_id: uuid.UUID = await conn.fetch_val(
        "INSERT INTO mfa_tickets (token_hash, binding_hash, user_id, amr, return_to, expires_at)"
        " VALUES (%(h)s, %(b)s, %(u)s, %(amr)s, %(r)s, %(e)s) RETURNING id",
        {
            "h": token_hash,
            "b": binding_hash,
            "u": user_id,
            "amr": amr,
            "r": return_to,
            "e": expires_at,
        },
    )
    return ticket_id


async def live_ticket(conn: Conn, token_hash: bytes) -> Row | None:
    return await conn.fetch_one(
        "SELECT * FROM mfa_tickets WHERE token_hash = %(h)s AND used_at IS NULL"
        " AND expires_at > now()",
        {"h": token_hash},
    )


async def consume_ticket(conn: Conn, ticket_id: uuid.UUID) -> bool:
    return await affected(
        conn,
        "UPDATE mfa_tickets SET used_at = now() WHERE id = %(id)s AND used_at IS NULL"
        " AND expires_at > now()",
        {"id": ticket_id},
    )


# -- passkeys ---------------------------------------------------------------------------------


async def passkeys_of(conn: Conn, user_id: uuid.UUID) -> list[Row]:
    return await conn.fetch_all(
        "SELECT * FROM passkeys WHERE user_id = %(u)s ORDER BY created_at, id", {"u": user_id}
    )


async def passkey_by_credential(conn: Conn, credential_id: bytes) -> Row | None:
    return await conn.fetch_one(
        "SELECT * FROM passkeys WHERE credential_id = %(c)s", {"c": credential_id}
    )


async def insert_passkey(
    conn: Conn,
    *,
    user_id: uuid.UUID,
    credential_id: bytes,
    public_key: bytes,
    sign_count: int,
    aaguid: str | None,
    transports: list[str],
    name: str,
    backed_up: bool,
) -> Row:
    row = await conn.fetch_one(
        "INSERT INTO passkeys (user_id, credential_id, public_key, sign_count, aaguid,"
        " transports, name, backed_up) VALUES (%(u)s, %(c)s, %(k)s, %(n)s, %(a)s, %(t)s,"
        " %(name)s, %(b)s) ON CONFLICT (credential_id) DO NOTHING RETURNING *",
        {
            "u": user_id,
            "c": credential_id,
            "k": public_key,
            "n": sign_count,
            "a": aaguid,
            "t": transports,
            "name": name,
            "b": backed_up,
        },
    )
    if row is None:
        raise LookupError("credential already registered")
    return row


async def touch_passkey(conn: Conn, *, passkey_id: uuid.UUID, sign_count: int) -> None:
    await conn.execute(
        "UPDATE passkeys SET sign_count = %(n)s, last_used_at = now() WHERE id = %(id)s",
        {"n": sign_count, "id": passkey_id},
    )


async def rename_passkey(
    conn: Conn, *, user_id: uuid.UUID, passkey_id: uuid.UUID, name: str
) -> Row | None:
    return await conn.fetch_one(
        "UPDATE passkeys SET name = %(n)s WHERE id = %(id)s AND user_id = %(u)s RETURNING *",
        {"n": name, "id": passkey_id, "u": user_id},
    )


async def delete_passkey(conn: Conn, *, user_id: uuid.UUID, passkey_id: uuid.UUID) -> bool:
    return await affected(
        conn,
        "DELETE FROM passkeys WHERE id = %(id)s AND user_id = %(u)s",
        {"id": passkey_id, "u": user_id},
    )


async def delete_passkeys(conn: Conn, user_id: uuid.UUID) -> None:
    await conn.execute("DELETE FROM passkeys WHERE user_id = %(u)s", {"u": user_id})


# -- WebAuthn challenges ----------------------------------------------------------------------


async def insert_challenge(
    conn: Conn,
    *,
    challenge_hash: bytes,
    purpose: str,
    user_id: uuid.UUID | None,
    ticket_id: uuid.UUID | None,
    expires_at: dt.datetime,
) -> None:
    await conn.execute(
        "INSERT INTO webauthn_challenges (challenge_hash, purpose, user_id, ticket_id,"
        " expires_at) VALUES (%(h)s, %(p)s, %(u)s, %(t)s, %(e)s)",
        {"h": challenge_hash, "p": purpose, "u": user_id, "t": ticket_id, "e": expires_at},
    )


async def take_challenge(conn: Conn, *, challenge_hash: bytes, purpose: str) -> Row | None:
    """Spend a live challenge of that purpose (single use: deleted as it is read)."""
    return await conn.fetch_one(
        "DELETE FROM webauthn_challenges WHERE challenge_hash = %(h)s AND purpose = %(p)s"
        " RETURNING *, expires_at > now() AS live",
        {"h": challenge_hash, "p": purpose},
    )


# -- account policy ---------------------------------------------------------------------------


async def user_mfa_enabled(conn: Conn, user_id: uuid.UUID) -> bool:
    return bool(
        await conn.fetch_val("SELECT mfa_enabled FROM users WHERE id = %(u)s", {"u": user_id})
    )


async def user_by_email(conn: Conn, email: str) -> Row | None:
    return await conn.fetch_one(
        "SELECT id, email, mfa_enabled FROM users WHERE lower(email) = lower(%(e)s)",
        {"e": email.strip()},
    )


# -- "This wasn't me" links of sensitive actions (sql/0200) -----------------------------------


async def notice_address(conn: Conn, user_id: uuid.UUID) -> str | None:
    """Where a user's security notice goes (a just-deleted user's kept address)."""
    value: str | None = await conn.fetch_val(
        "SELECT COALESCE(deleted_email, email) FROM users WHERE id = %(u)s", {"u": user_id}
    )
    return value


async def insert_undo(
    conn: Conn,
    *,
    undo_id: uuid.UUID,
    user_id: uuid.UUID,
    action: str,
    notify_to: str,
    data: dict[str, Any],
    token_hash: bytes,
    days: int,
) -> None:
    await conn.execute(
        "INSERT INTO security_undo (id, user_id, action, notify_to, data, token_hash,"
        " expires_at) VALUES (%(id)s, %(u)s, %(a)s, %(to)s, %(d)s, %(h)s,"
        " now() + make_interval(days => %(days)s))",
        {
            "id": undo_id,
            "u": user_id,
            "a": action,
            "to": notify_to,
            "d": Json(data),
            "h": token_hash,
            "days": days,
        },
    )


async def lock_undo(conn: Conn, token_hash: bytes) -> Row | None:
    """The live, unused undo row of a token hash, locked."""
    return await conn.fetch_one(
        "SELECT * FROM security_undo WHERE token_hash = %(h)s AND used_at IS NULL"
        " AND expires_at > now() FOR UPDATE",
        {"h": token_hash},
    )


async def undo_row(conn: Conn, undo_id: uuid.UUID) -> Row | None:
    return await conn.fetch_one("SELECT * FROM security_undo WHERE id = %(i)s", {"i": undo_id})


async def mark_undo_used(conn: Conn, undo_id: uuid.UUID) -> None:
    await conn.execute("UPDATE security_undo SET used_at = now() WHERE id = %(i)s", {"i": undo_id})


# -- undoing factor changes ("This wasn't me") -------------------------------------------------


async def take_passkey(conn: Conn, *, user_id: uuid.UUID, passkey_id: uuid.UUID) -> Row | None:
    """Delete one passkey of the user; the row it was (to put back on undo)."""
    return await conn.fetch_one(
        "DELETE FROM passkeys WHERE id = %(id)s AND user_id = %(u)s RETURNING *",
        {"id": passkey_id, "u": user_id},
    )


async def put_back_passkey(conn: Conn, *, user_id: uuid.UUID, row: dict[str, Any]) -> bool:
    """A removed passkey back as it was (unless its credential was registered again)."""
    return await affected(
        conn,
        "INSERT INTO passkeys (id, user_id, credential_id, public_key, sign_count, aaguid,"
        " transports, name, backed_up, created_at) VALUES (%(id)s, %(u)s,"
        " decode(%(c)s, 'hex'), decode(%(k)s, 'hex'), %(n)s, %(a)s, %(t)s, %(name)s,"
        " %(b)s, %(at)s) ON CONFLICT DO NOTHING",
        {
            "id": row["id"],
            "u": user_id,
            "c": row["credentialId"],
            "k": row["publicKey"],
            "n": row["signCount"],
            "a": row["aaguid"],
            "t": row["transports"],
            "name": row["name"],
            "b": row["backedUp"],
            "at": row["createdAt"],
        },
    )


async def delete_totp_created_at(conn: Conn, *, user_id: uuid.UUID, created_at: str) -> bool:
    """Remove the confirmed secret only when it is the one enrolled at `created_at`."""
    return await affected(
        conn,
        "DELETE FROM mfa_totp WHERE user_id = %(u)s AND confirmed_at IS NOT NULL"
        " AND created_at = %(at)s::timestamptz",
        {"u": user_id, "at": created_at},
    )


async def put_back_totp(
    conn: Conn, *, user_id: uuid.UUID, secret_hex: str, last_used_step: int | None
) -> bool:
    """A removed secret back, confirmed (unless another one was confirmed meanwhile)."""
    return await affected(
        conn,
        "INSERT INTO mfa_totp (user_id, secret_encrypted, confirmed_at, last_used_step)"
        " VALUES (%(u)s, decode(%(s)s, 'hex'), now(), %(step)s)"
        " ON CONFLICT (user_id) DO UPDATE SET secret_encrypted = EXCLUDED.secret_encrypted,"
        " confirmed_at = now(), last_used_step = EXCLUDED.last_used_step, created_at = now()"
        " WHERE mfa_totp.confirmed_at IS NULL",
        {"u": user_id, "s": secret_hex, "step": last_used_step},
    )


async def unused_recovery_hashes(conn: Conn, user_id: uuid.UUID) -> list[bytes]:
    hashes = await fetch_column(
        conn,
        "SELECT code_hash FROM mfa_recovery_codes WHERE user_id = %(u)s AND used_at IS NULL",
        {"u": user_id},
    )
    return [bytes(code_hash) for code_hash in hashes]


# -- the mfa sweep ----------------------------------------------------------------------------


def expired_rows() -> list[Purge]:
    """What the mfa sweep deletes, in this order: tickets an hour past their life, WebAuthn
    challenges past theirs, "This wasn't me" links a day past their 7 days (kept a day longer
    for the support desk). (Sign-in records of ended families are identity's: the sweep calls
    it.)"""
    now = func.now()
    return [
        (mfa_tickets, mfa_tickets.c.expires_at < now - dt.timedelta(hours=1)),
        (webauthn_challenges, webauthn_challenges.c.expires_at < now),
        (security_undo, security_undo.c.expires_at < now - dt.timedelta(days=1)),
    ]
