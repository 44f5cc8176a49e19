"""Queries of the auth domain's own answers; each takes the connection it is given.

The tables of users, sessions and tokens are identity's: their queries live in
tenantd/identity/queries.py.
"""

from __future__ import annotations

import uuid

from tenantd.db import Conn, Row
from tenantd.db.core import Prepared

# One round trip: user, providers, memberships and the active account's plan and overrides.
ME = Prepared(
    "tenantd_me",
    """
SELECT u.id, u.email, u.first_name, u.last_name, u.email_verified_at, u.mfa_enabled,
       (p.user_id IS NOT NULL) AS has_password,
       p.created_at AS password_created_at,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('provider', i.provider,
                                                    'createdAt', i.created_at)
                                  ORDER BY i.created_at)
                   FROM user_identities i WHERE i.user_id = u.id), '[]') AS identities,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('accountId', m.account_id,
                                                    'accountName', a.name,
                                                    'role', m.role,
                                                    'createdAt', m.created_at,
                                                    'requireMfa', a.require_mfa)
                                  ORDER BY m.created_at, m.account_id)
                   FROM memberships m JOIN accounts a ON a.id = m.account_id
                  WHERE m.user_id = u.id AND m.revoked_at IS NULL AND a.deleted_at IS NULL),
                '[]') AS memberships,
       (SELECT pl.features FROM account_plans ap JOIN plans pl ON pl.code = ap.plan_code
         WHERE ap.account_id = %(aid)s) AS plan_features,
       COALESCE((SELECT jsonb_object_agg(o.feature, o.enabled)
                   FROM account_feature_overrides o WHERE o.account_id = %(aid)s),
                '{}') AS overrides
  FROM users u
  LEFT JOIN user_passwords p ON p.user_id = u.id
 WHERE u.id = %(uid)s
""",
)


async def me(conn: Conn, *, user_id: uuid.UUID, account_id: uuid.UUID | None) -> Row | None:
    """The /me row of a user, with the plan and overrides of `account_id` (one round trip)."""
    return await conn.fetch_one(ME, {"uid": user_id, "aid": account_id})


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
SELECT seen.inserted, before.any_known FROM seen, before
""",
)


async def remember_device(
    conn: Conn, *, user_id: uuid.UUID, device_hash: bytes, browser: str | None, os: str | None
) -> Row:
    """Record a sign-in's browser: {inserted (first time for this user), any_known (the user
    had a browser recorded before)}."""
    row = await conn.fetch_one(
        REMEMBER_DEVICE, {"u": user_id, "h": device_hash, "b": browser, "o": os}
    )
    assert row is not None
    return row
