"""`tenantd users list|show|disable|enable|delete|resend-verification|impersonate` as an
operator runs them (separate processes), over the same service functions as the admin API."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import jwt

from tenantd.db import Database
from tests.auth.helpers import last_token
from tests.factories import Factory, run_tenantd
from tests.helpers import ORIGIN, error, eventually


async def test_list_show_disable_enable(
    client: Any, factory: Factory, db: Database, env: dict[str, str]
) -> None:
    ada = await factory.user(email="ada@cli.example", first_name="Ada", last_name="Lovelace")
    await factory.user(email="bob@cli.example")

    code, out, err = await run_tenantd(env, "users", "list", "--query", "lovelace", "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [item["email"] for item in listed["items"]] == [ada.email]
    assert listed["nextCursor"] is None
    # The API's own encoding: ISO dates with a T, camelCase keys.
    assert "T" in listed["items"][0]["createdAt"] and "emailVerifiedAt" in listed["items"][0]

    code, out, err = await run_tenantd(env, "users", "list")
    assert code == 0 and "ada@cli.example" in out and "bob@cli.example" in out, err

    code, out, err = await run_tenantd(env, "users", "show", ada.email, "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert shown["id"] == str(ada.id)
    assert [m["role"] for m in shown["memberships"]] == ["owner"]
    assert [p["provider"] for p in shown["authProviders"]] == ["password"]

    code, out, err = await run_tenantd(env, "users", "disable", ada.email)
    assert code == 0 and "disabled" in out, err
    login = {"email": ada.email, "password": ada.password}
    await error(await client.post("/api/v1/auth/login", json=login), 403, "USER_DISABLED")
    code, out, err = await run_tenantd(env, "users", "enable", str(ada.id))
    assert code == 0, err
    assert (await client.post("/api/v1/auth/login", json=login)).status == 200

    rows = await db.fetch_all(
        "SELECT action, data FROM audit_log WHERE target = %(t)s ORDER BY id", {"t": str(ada.id)}
    )
    mine = [(r["action"], r["data"]["actor"]) for r in rows if "actor" in r["data"]]
    assert mine == [
        ("user.disabled", {"type": "operator"}),
        ("user.enabled", {"type": "operator"}),
    ]

    code, _, err = await run_tenantd(env, "users", "show", "nobody@cli.example")
    assert code == 1 and "No user has this email address" in err


async def test_impersonate_prints_a_link_resend_and_delete(
    make_client: Any, factory: Factory, db: Database, env: dict[str, str], mail_dir: Path
) -> None:
    user = await factory.user()
    code, out, err = await run_tenantd(
        env, "users", "impersonate", user.email, "--reason", "ticket 12"
    )
    assert code == 0, err
    url = out.strip()
    assert re.fullmatch(re.escape(ORIGIN) + r"/impersonate\?token=[A-Za-z0-9_-]{43}", url), out
    browser = await make_client()
    parts = urlsplit(url)
    response = await browser.get(f"{parts.path}?{parts.query}", allow_redirects=False)
    assert response.status == 303
    token = browser.session.cookie_jar.filter_cookies(browser.make_url("/"))["auth_token"].value
    assert jwt.decode(token, options={"verify_signature": False})["act"] == {"sub": "operator"}
    reason = await db.fetch_val(
        "SELECT data->>'reason' FROM audit_log WHERE action = 'user.impersonation_link_created'"
    )
    assert reason == "ticket 12"
    code, _, err = await run_tenantd(env, "users", "impersonate", user.email)
    assert code == 2 and "--reason" in err

    fresh = await factory.user(verified=False, account=False)
    code, out, err = await run_tenantd(env, "users", "resend-verification", fresh.email)
    assert code == 0, err
    # The mail leaves from a job.
    await eventually(lambda: _has_link(mail_dir, fresh.email))
    code, _, err = await run_tenantd(env, "users", "resend-verification", user.email)
    assert code == 1 and "verified already" in err

    code, out, err = await run_tenantd(env, "users", "delete", user.email, "--yes")
    assert code == 0, err
    assert await db.fetch_val(
        "SELECT deleted_at IS NOT NULL FROM users WHERE id = %(u)s", {"u": user.id}
    )
    await error(await browser.get("/api/v1/users/me"), 401)


def _has_link(mail_dir: Path, email: str) -> bool:
    try:
        return bool(last_token(mail_dir, email))
    except AssertionError:
        return False
