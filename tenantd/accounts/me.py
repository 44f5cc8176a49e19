"""The current-user response of GET /api/v1/users/me."""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from tenantd.accounts import queries
from tenantd.accounts.plans import resolve_features
from tenantd.db import Conn, Database
from tenantd.identity.context import ContextCache
from tenantd.identity.permissions import capabilities, effective
from tenantd.principal import Principal


async def current_user(conn: Conn, principal: Principal) -> dict[str, Any] | None:
    """The signed-in body of /me, or None when the user no longer exists."""
    row = await queries.me(conn, user_id=principal.user_id, account_id=principal.account_id)
    if row is None:
        return None
    memberships = row["memberships"]
    active = next((m for m in memberships if m["accountId"] == str(principal.account_id)), None)
    features = resolve_features(list(row["plan_features"] or []), row["overrides"])
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


async def current_user_json(
    db: Database, cache: ContextCache, principal: Principal
) -> bytes | None:
    """The serialised /me body: from the context cache, else one query (then cached)."""
    cached = cache.me_body(principal.user_id, principal.account_id)
    if cached is not None:
        return cached
    generation = cache.generation
    async with db.connection() as conn:
        body = await current_user(conn, principal)
    if body is None:
        return None
    encoded = orjson.dumps(body, option=orjson.OPT_UTC_Z)
    cache.store_me(principal.user_id, principal.account_id, encoded, generation)
    return encoded
