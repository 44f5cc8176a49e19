"""The operators' admin API (issue 28 part 4): `/api/v1/admin/users` under the API-key scope
`users:manage` — list and search, show, disable (every session ends, every sign-in path
refused with USER_DISABLED), enable, delete, resend verification; every change audited."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from tenantd.db import Database
from tenantd.identity.domain import identity_of
from tenantd.identity.errors import UserDisabled
from tenantd.identity.sessions import ClientMeta
from tenantd.identity.settings import IdentitySettings
from tenantd.identity.signin import start_session
from tests.apikeys.helpers import bearer, new_key
from tests.auth.helpers import last_token, mail_sent, mails_to, register, set_cookies
from tests.factories import Factory, mail_text
from tests.helpers import data, error
from tests.mfa.helpers import signed_in as mfa_signed_in
from tests.mfa.helpers import user_with_totp
from tests.mfa.soft_authenticator import SoftAuthenticator

USERS = "/api/v1/admin/users"
CODE = re.compile(r"code to sign in: (\d{6})")


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["MAGIC_LINK_ENABLED"] = "true"
    return env


@pytest.fixture
async def admin(db: Database) -> dict[str, str]:
    """Headers of a key holding users:manage."""
    key = await new_key(db, "users:manage", name="support")
    return {**bearer(key.token), "X-Key-Id": str(key.id)}


async def audit_rows(db: Database, user_id: uuid.UUID) -> list[Any]:
    return await db.fetch_all(
        "SELECT action, data FROM audit_log WHERE target = %(t)s ORDER BY id",
        {"t": str(user_id)},
    )


async def test_scope_is_enforced(client: Any, db: Database, factory: Factory) -> None:
    user = await factory.user()
    wrong = await new_key(db, "events:read", "webhooks:manage", "notifications:send")
    for method, path in [
        ("GET", USERS),
        ("GET", f"{USERS}/{user.id}"),
        ("POST", f"{USERS}/{user.id}/disable"),
        ("POST", f"{USERS}/{user.id}/enable"),
        ("DELETE", f"{USERS}/{user.id}"),
        ("POST", f"{USERS}/{user.id}/resend-verification"),
        ("POST", f"{USERS}/{user.id}/impersonate"),
    ]:
        await error(await client.request(method, path, json={"reason": "x"}), 401)
        refused = await error(
            await client.request(method, path, json={"reason": "x"}, headers=bearer(wrong.token)),
            403,
        )
        assert refused["details"] == {"scope": "users:manage"}, (method, path)
    # A signed-in user's session cookie opens none of them either.
    cookies = await factory.cookies(user)
    client.session.cookie_jar.update_cookies(cookies, response_url=client.make_url("/"))
    await error(await client.get(USERS), 401)
    assert (
        await db.fetch_val("SELECT disabled_at FROM users WHERE id = %(u)s", {"u": user.id}) is None
    )


async def test_list_search_and_pages(
    client: Any, factory: Factory, admin: dict[str, str], db: Database
) -> None:
    ada = await factory.user(email="ada.lovelace@example.com", first_name="Ada", last_name="King")
    grace = await factory.user(email="grace@navy.example", first_name="Grace", last_name="Hopper")
    others = [await factory.user(email=f"user{i}@other.example") for i in range(5)]
    gone = await factory.user(email="gone@example.com")
    await db.execute("UPDATE users SET deleted_at = now() WHERE id = %(u)s", {"u": gone.id})

    page = await data(await client.get(USERS, params={"limit": "3"}, headers=admin))
    assert set(page) == {"items", "nextCursor"}
    first = page["items"][0]
    assert set(first) == {
        "id",
        "email",
        "emailVerifiedAt",
        "disabledAt",
        "createdAt",
        "lastSignInAt",
    }
    # Keyset pages: every live user once, newest first, then no cursor.
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": "3", **({"cursor": cursor} if cursor else {})}
        page = await data(await client.get(USERS, params=params, headers=admin))
        seen += [item["email"] for item in page["items"]]
        cursor = page["nextCursor"]
        if cursor is None:
            break
    expected = [u.email for u in reversed([ada, grace, *others])]
    assert seen == expected

    async def search(query: str) -> list[str]:
        found = await data(await client.get(USERS, params={"query": query}, headers=admin))
        return [item["email"] for item in found["items"]]

    assert await search("lovelace") == [ada.email]  # substring of the email
    assert await search("HOPPER") == [grace.email]  # a name, any case
    assert await search("gr") == [grace.email]  # short: email prefix
    assert await search("ad") == [ada.email]
    assert await search("%") == []  # LIKE wildcards are literal
    assert await search("_") == []
    assert await search("gone@") == []  # deleted users are not listed
    await error(await client.get(USERS, params={"cursor": "bm9wZQ"}, headers=admin), 422)


async def test_show_has_memberships_and_providers(
    client: Any, factory: Factory, admin: dict[str, str], db: Database
) -> None:
    owner = await factory.user(plan="team")
    user = await factory.user()
    assert owner.account_id is not None
    await factory.member(owner.account_id, user.id, "admin")
    await db.execute(
        "INSERT INTO user_identities (user_id, provider, subject, email)"
        " VALUES (%(u)s, 'google', 'sub-1', %(e)s)",
        {"u": user.id, "e": user.email},
    )
    shown = await data(await client.get(f"{USERS}/{user.id}", headers=admin))
    assert shown["id"] == str(user.id) and shown["email"] == user.email
    roles = {(m["accountId"], m["role"]) for m in shown["memberships"]}
    assert roles == {(str(user.account_id), "owner"), (str(owner.account_id), "admin")}
    assert [p["provider"] for p in shown["authProviders"]] == ["password", "google"]
    assert "password_hash" not in repr(shown)
    await error(await client.get(f"{USERS}/{uuid.uuid4()}", headers=admin), 404)


async def sign_in(client: Any, user: Any) -> Any:
    return await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )


async def test_disable_ends_sessions_and_refuses_every_sign_in_path(
    make_client: Any, factory: Factory, admin: dict[str, str], db: Database, mail_dir: Path
) -> None:
    user = await factory.user()
    browser = await make_client()
    await data(await sign_in(browser, user))
    refresh_cookie = browser.session.cookie_jar.filter_cookies(browser.make_url("/"))[
        "refresh_token"
    ].value
    assert (await browser.get("/api/v1/users/me")).status == 200
    # Ask for an email code and a magic link before the user is disabled.
    await data(await browser.post("/api/v1/auth/email-code", json={"email": user.email}))
    await mail_sent(browser)

    admin_client = await make_client()
    disabled = await data(await admin_client.post(f"{USERS}/{user.id}/disable", headers=admin))
    assert disabled["disabledAt"] is not None

    # The session ended at once: its access token and its refresh token.
    await error(await browser.get("/api/v1/users/me"), 401)
    fresh = await make_client()
    fresh.session.cookie_jar.update_cookies(
        {"refresh_token": refresh_cookie}, response_url=fresh.make_url("/")
    )
    await error(await fresh.post("/api/v1/auth/refresh"), 403, "USER_DISABLED")

    # Password.
    await error(await sign_in(await make_client(), user), 403, "USER_DISABLED")
    # Email code and magic link.
    text = mail_text(mails_to(mail_dir, user.email)[-1])
    code = CODE.search(text)
    assert code is not None, text
    stranger = await make_client()
    await error(
        await stranger.post(
            "/api/v1/auth/email-code/verify", json={"email": user.email, "code": code.group(1)}
        ),
        403,
        "USER_DISABLED",
    )
    link = re.search(r"/email-code\?token=(\S+)", text)
    assert link is not None
    await error(
        await stranger.post("/api/v1/auth/email-code/verify", json={"token": link.group(1)}),
        403,
        "USER_DISABLED",
    )
    # Every sign-in starts its session in one place (providers and passkeys: tests below).
    async with db.transaction() as conn:
        with pytest.raises(UserDisabled):
            await start_session(
                identity_of(stranger.server.app),
                conn,
                user_id=user.id,
                account_id=user.account_id,
                client=ClientMeta(),
                method="google",
                amr=("fed",),
            )

    # Enabled: sign-in works again; the old sessions stay ended.
    enabled = await data(await admin_client.post(f"{USERS}/{user.id}/enable", headers=admin))
    assert enabled["disabledAt"] is None
    again = await make_client()
    await data(await sign_in(again, user))
    assert (await again.get("/api/v1/users/me")).status == 200
    await error(await browser.get("/api/v1/users/me"), 401)
    listed = await data(await admin_client.get(f"{USERS}/{user.id}", headers=admin))
    assert listed["lastSignInAt"] is not None

    rows = await audit_rows(db, user.id)
    key_id = admin["X-Key-Id"]
    actions = [(r["action"], (r["data"].get("actor") or {}).get("id")) for r in rows]
    assert ("user.disabled", key_id) in actions and ("user.enabled", key_id) in actions


async def test_verification_link_of_a_disabled_user_is_refused(
    client: Any, make_client: Any, admin: dict[str, str], db: Database, mail_dir: Path
) -> None:
    email = f"new-{uuid.uuid4().hex[:6]}@example.com"
    await register(client, email)
    user_id = await db.fetch_val("SELECT id FROM users WHERE email = %(e)s", {"e": email})
    await data(await client.post(f"{USERS}/{user_id}/disable", headers=admin))
    response = await client.post("/auth/verify-email", json={"token": last_token(mail_dir, email)})
    await error(response, 403, "USER_DISABLED")
    assert "auth_token" not in set_cookies(response)


async def test_resend_verification_mails_a_link(
    client: Any, factory: Factory, admin: dict[str, str], db: Database, mail_dir: Path
) -> None:
    user = await factory.user(verified=False, account=False)
    await data(await client.post(f"{USERS}/{user.id}/resend-verification", headers=admin))
    await mail_sent(client)
    token = last_token(mail_dir, user.email)
    await data(await client.post("/auth/verify-email", json={"token": token}))
    verified = await factory.user()
    await error(await client.post(f"{USERS}/{verified.id}/resend-verification", headers=admin), 409)
    assert [r["action"] for r in await audit_rows(db, user.id)][:1] == ["user.verification_resent"]


async def test_delete_erases_as_self_delete_does(
    make_client: Any, factory: Factory, admin: dict[str, str], db: Database
) -> None:
    user = await factory.user()
    browser = await make_client()
    await data(await sign_in(browser, user))
    admin_client = await make_client()
    done = await data(await admin_client.delete(f"{USERS}/{user.id}", headers=admin))
    assert done["accountsDeleted"] == [str(user.account_id)]
    row = await db.fetch_one(
        "SELECT email, deleted_email, deleted_at FROM users WHERE id = %(u)s", {"u": user.id}
    )
    assert row["deleted_at"] is not None and row["deleted_email"] == user.email
    assert row["email"].endswith("@invalid")
    await error(await browser.get("/api/v1/users/me"), 401)
    await error(await sign_in(await make_client(), user), 401)
    await error(await admin_client.get(f"{USERS}/{user.id}", headers=admin), 404)
    await error(await admin_client.delete(f"{USERS}/{user.id}", headers=admin), 404)
    actions = [r["action"] for r in await audit_rows(db, user.id)]
    assert "user.deleted" in actions and "user.deleted_by_operator" in actions
    kinds = await db.fetch_all(
        "SELECT type, data FROM security_events WHERE user_id = %(u)s AND type = 'user_deleted'",
        {"u": user.id},
    )
    assert kinds and kinds[0]["data"]["by"] == "operator"


async def test_a_disabled_user_with_a_second_factor_gets_no_ticket(
    make_client: Any, factory: Factory, admin: dict[str, str], db: Database, settings: Any
) -> None:
    user, _ = await user_with_totp(factory, make_client, db, settings)
    browser = await make_client()
    first = await data(await sign_in(browser, user))
    assert first["mfaRequired"] is True  # before: the password earns a ticket
    await data(await browser.post(f"{USERS}/{user.id}/disable", headers=admin))
    await error(await sign_in(await make_client(), user), 403, "USER_DISABLED")


async def test_a_disabled_user_cannot_sign_in_with_a_passkey(
    make_client: Any, factory: Factory, admin: dict[str, str], db: Database, settings: Any
) -> None:
    user = await factory.user()
    browser = await mfa_signed_in(make_client, db, settings, user)
    key = SoftAuthenticator(
        rp_id=settings.section(IdentitySettings).webauthn_rp_id,
        origin=settings.section(IdentitySettings).webauthn_origins[0],
    )
    options = await data(await browser.post("/api/v1/auth/passkeys/register/options"))
    registered = await browser.post(
        "/api/v1/auth/passkeys/register/verify",
        json={"credential": key.create(options), "name": "laptop"},
    )
    await data(registered, 201)

    async def passkey_sign_in() -> Any:
        stranger = await make_client()
        options = await data(
            await stranger.post("/api/v1/auth/passkeys/authenticate/options", json={})
        )
        return await stranger.post(
            "/api/v1/auth/passkeys/authenticate/verify", json={"credential": key.get(options)}
        )

    assert (await passkey_sign_in()).status == 200
    await data(await browser.post(f"{USERS}/{user.id}/disable", headers=admin))
    await error(await passkey_sign_in(), 403, "USER_DISABLED")
    shown = await data(await browser.get(f"{USERS}/{user.id}", headers=admin))
    assert [p["provider"] for p in shown["authProviders"]] == ["password", "passkey"]
