"""`tenantd api-keys create|list|revoke` as an operator runs them (separate processes)."""

from __future__ import annotations

import json
import re
from typing import Any

from tenantd.db import Database
from tests.apikeys.helpers import bearer
from tests.factories import run_tenantd

TOKEN = re.compile(r"tdk_([0-9a-f]{32})_[A-Za-z0-9_-]{43}")


async def test_create_prints_the_token_once_list_and_revoke(
    client: Any, db: Database, env: dict[str, str]
) -> None:
    code, out, err = await run_tenantd(
        env, "api-keys", "create", "--name", "backend", "--scopes", "events:read,webhooks:manage"
    )
    assert code == 0, err
    token = out.strip()
    match = TOKEN.fullmatch(token)
    assert match is not None, out
    assert "shown only this once" in err
    assert (await client.get("/test/server/events", headers=bearer(token))).status == 200

    code, out, err = await run_tenantd(env, "api-keys", "list", "--json")
    assert code == 0, err
    [listed] = json.loads(out)
    assert listed["id"].replace("-", "") == match.group(1)
    assert listed["name"] == "backend"
    assert listed["scopes"] == ["events:read", "webhooks:manage"]
    assert listed["lastUsedAt"] is not None
    assert listed["revokedAt"] is None
    assert listed["createdBy"].startswith("cli")
    assert token.split("_", 2)[2] not in out  # never the secret again

    code, out, err = await run_tenantd(env, "api-keys", "list")
    assert code == 0 and "backend" in out, err

    code, out, err = await run_tenantd(env, "api-keys", "revoke", listed["id"])
    assert code == 0, err
    assert "revoked" in out
    code, _, err = await run_tenantd(env, "api-keys", "revoke", listed["id"])
    assert code == 1 and "already revoked" in err
    code, out, _ = await run_tenantd(env, "api-keys", "list", "--active", "--json")
    assert json.loads(out) == []


async def test_refusals(db: Database, env: dict[str, str]) -> None:
    code, out, err = await run_tenantd(
        env, "api-keys", "create", "--name", "x", "--scopes", "events:read,admin"
    )
    assert code == 2 and "unknown scope 'admin'" in err and out == ""
    code, _, err = await run_tenantd(env, "api-keys", "create", "--name", "x", "--scopes", "")
    assert code == 2, err
    code, _, err = await run_tenantd(
        env, "api-keys", "create", "--name", " ", "--scopes", "events:read"
    )
    assert code == 2 and "name" in err
    code, _, err = await run_tenantd(
        env, "api-keys", "revoke", "3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80"
    )
    assert code == 1 and "not found" in err
    code, _, err = await run_tenantd(env, "api-keys", "revoke", "nope")
    assert code == 2
    assert await db.fetch_val("SELECT count(*) FROM api_keys") == 0
