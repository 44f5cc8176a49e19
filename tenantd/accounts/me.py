"""The current-user response of GET /api/v1/users/me, and its cache of serialised bodies.

The body depends on the user's row and memberships, the account, its plan and overrides,
passwords and identities: the triggers of sql/0070 and sql/0360 announce each write as
`user:<id>` or `account:<id>`. A user's change drops that user's bodies (per account asked);
an account's change empties the cache (the kernel's `cache.keyed` mechanism: bounded
staleness, no load that raced an invalidation is stored).
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from tenantd.accounts import queries
from tenantd.accounts.plans import features_of
from tenantd.cache.keyed import KeyedCache
from tenantd.db import Conn, Database
from tenantd.identity.permissions import capabilities, effective
from tenantd.principal import Principal

MAX_BODIES = 50_000  # serialised /me bodies (each a few hundred bytes)
CHANGES_KEPT = 10_000  # recent per-user invalidations remembered for races


class MeCache(KeyedCache[bytes]):
    """Serialised /me bodies by user, then by the account the token is in."""

    HEARS = frozenset({"user"})
    FLUSHED_BY = frozenset({"account"})

    def __init__(self, max_entries: int = MAX_BODIES, changes_kept: int = CHANGES_KEPT):
        super().__init__(budget=max_entries, changes_kept=changes_kept)


async def current_user(conn: Conn, principal: Principal) -> dict[str, Any] | None:
    """The signed-in body of /me, or None when the user no longer exists."""
    row = await queries.me(conn, user_id=principal.user_id, account_id=principal.account_id)
    if row is None:
        return None
    memberships = row["memberships"]
    active = next((m for m in memberships if m["accountId"] == str(principal.account_id)), None)
    features = features_of(row)
    providers = []
    if row["has_password"]:
        providers.append({"provider": "password", "createdAt": row["password_created_at"]})
    providers.extend(row["identities"])
    role = active["role"] if active else None
    custom = tuple(row["role_permissions"]) if active and row["role_permissions"] else None
    return {
        "user": {
            "id": row["id"],
            "email": row["email"],
            "firstName": row["first_name"],
            "lastName": row["last_name"],
            "emailVerifiedAt": row["email_verified_at"],
            "mfaEnabled": bool(row["mfa_enabled"]),
        },
        "account": {
            "id": uuid.UUID(active["accountId"]),
            "name": active["accountName"],
            "requireMfa": bool(active["requireMfa"]),
        }
        if active
        else None,
        "role": role,
        "memberships": [{k: v for k, v in m.items() if k != "requireMfa"} for m in memberships],
        "features": features if active else {},
        "permissions": effective(role, custom),
        "capabilities": capabilities(role, custom, features),
        "authProviders": providers,
        "hasPasswordLogin": bool(row["has_password"]),
    }


async def current_user_json(db: Database, cache: MeCache, principal: Principal) -> bytes | None:
    """The serialised /me body: from the cache, else one query (then cached)."""
    cached = cache.get(principal.user_id, principal.account_id)
    if cached is not None:
        return cached
    version = cache.version()
    async with db.connection() as conn:
        body = await current_user(conn, principal)
    if body is None:
        return None
    encoded = orjson.dumps(body, option=orjson.OPT_UTC_Z)
    cache.store(principal.user_id, principal.account_id, encoded, version)
    return encoded
