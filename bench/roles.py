"""`/me` of members holding a custom role (issue 30 part 3): the same warm /me as
`me_authenticated`, but every caller's role is a custom role of its account, so the guard and
`/me` read the role's permissions too. Target: within 5% of `me_authenticated`."""

from __future__ import annotations

import asyncio
import uuid

from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.tokens import issue_access_token

ROLE = "bench_support"
# A realistic custom role: some of tenantd's permissions, some of the app's, a wildcard.
GRANTS = ["account:read", "members:read", "audit:read", "billing:*", "reports:export"]

ROLES_SQL = """
INSERT INTO account_roles (account_id, key, name, permissions)
SELECT DISTINCT m.account_id, %(key)s, 'Support', %(grants)s
  FROM memberships m
 WHERE m.role IN ('member', %(key)s) AND m.revoked_at IS NULL
   AND m.account_id IN (SELECT account_id FROM memberships
                         WHERE role IN ('member', %(key)s) AND revoked_at IS NULL
                         GROUP BY account_id ORDER BY account_id LIMIT %(n)s)
ON CONFLICT DO NOTHING
"""
PICK_SQL = """
UPDATE memberships m SET role = %(key)s
  FROM (SELECT DISTINCT ON (account_id) id FROM memberships
         WHERE role IN ('member', %(key)s) AND revoked_at IS NULL
           AND account_id IN (SELECT account_id FROM account_roles WHERE key = %(key)s)
         ORDER BY account_id, user_id) picked
 WHERE m.id = picked.id
RETURNING m.user_id, m.account_id
"""


def custom_role_tokens(database_url: str, keyring: Keyring, count: int) -> list[str]:
    """Access tokens of `count` members of distinct accounts, each given the custom role
    (idempotent: a second run picks the same members)."""

    async def pick() -> list[tuple[uuid.UUID, uuid.UUID]]:
        db = await create_database(url_to_dsn(database_url), minsize=1, maxsize=1)
        try:
            async with db.transaction() as conn:
                await conn.execute(ROLES_SQL, {"key": ROLE, "grants": GRANTS, "n": count})
                rows = await conn.fetch_all(PICK_SQL, {"key": ROLE})
        finally:
            await db.close()
        return [(row["user_id"], row["account_id"]) for row in rows]

    tokens = []
    for user_id, account_id in asyncio.run(pick()):
        token, _ = issue_access_token(keyring, user_id=user_id, account_id=account_id)
        tokens.append(token)
    return tokens
