"""The current-user response of GET /api/v1/users/me."""

from __future__ import annotations

import uuid
from typing import Any

import orjson

from tenantd.accounts.permissions import capabilities
from tenantd.accounts.plans import resolve_features
from tenantd.cache.context import ContextCache
from tenantd.db import Conn, Database
from tenantd.db.core import Prepared
from tenantd.principal import Principal

# One round trip: user, providers, memberships and the active account's plan and overrides.
ME = Prepared(
    "tenantd_me",
    """
SELECT u.id, u.email, u.first_name, u.last_name, u.email_verified_at,
       (p.user_id IS NOT NULL) AS has_password,
       p.created_at AS password_created_at,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('provider', i.provider,
                                                    'createdAt', i.created_at)
                                  ORDER BY i.created_at)
                   FROM user_identities i WHERE i.user_id = u.id), '[]') AS identities,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('accountId', m.account_id,
                                                    'accountName', a.name,
                                                    'role', m.role,
                                                    'createdAt', m.created_at)
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


async def current_user(conn: Conn, principal: Principal) -> dict[str, Any] | None:
    """The signed-in body of /me, or None when the user no longer exists."""
    row = await conn.fetch_one(ME, {"uid": principal.user_id, "aid": principal.account_id})
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
    return {
        "user": {
            "id": row["id"],
            "email": row["email"],
            "firstName": row["first_name"],
            "lastName": row["last_name"],
            "emailVerifiedAt": row["email_verified_at"],
        },
        "account": {"id": uuid.UUID(active["accountId"]), "name": active["accountName"]}
        if active
        else None,
        "role": role,
        "memberships": memberships,
        "features": features if active else {},
        "capabilities": capabilities(role, features),
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
