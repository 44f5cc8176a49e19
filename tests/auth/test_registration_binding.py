"""Registration binding: a sign-up by someone who does not own the address never gets its
password onto the account the mailbox owner lands in, whatever links are clicked in whatever
order ("pre-hijacked accounts", Sudhodanan & Paverd, USENIX Security 2022), and a later
sign-up never invalidates an earlier link (verifying with one ends them all)."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import pytest

from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.migrate import available_migrations, migrate
from tenantd.identity.passwords import hash_password
from tenantd.identity.tokens import token_hash
from tests.auth.helpers import last_token, mail_sent, register, set_cookies
from tests.helpers import SECRET, error_of
from tests.ops.servers import fresh_database

VICTIM = "victim@example.com"
SQUATTER_PASSWORD = "the squatter chose this"
OWNER_PASSWORD = "the owner chose this one"


async def login_status(make_client: Any, email: str, password: str) -> int:
    response = await (await make_client()).post(
        "/api/v1/auth/login", json={"email": email, "password": password}
    )
    await response.read()
    return response.status


async def verify(browser: Any, token: str, **extra: str) -> dict[str, Any]:
    response = await browser.post("/auth/verify-email", json={"token": token, **extra})
    body = await response.json()
    assert response.status == 200, body
    data: dict[str, Any] = body["data"]
    return data


async def error_status(browser: Any, token: str, status: int) -> None:
    response = await browser.post("/auth/verify-email", json={"token": token})
    assert response.status == status, await response.text()


async def has_password_login(browser: Any) -> bool:
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["user"]["emailVerifiedAt"] is not None
    return bool(me["hasPasswordLogin"])


async def sign_up(make_client: Any, mail_dir: Path, password: str) -> tuple[Any, str]:
    """A browser that registered VICTIM with `password`, and the token of the link it got."""
    browser = await make_client()
    await register(browser, VICTIM, password)
    return browser, last_token(mail_dir, VICTIM)


async def test_squatters_link_used_by_the_owner_in_another_browser_sets_no_password(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    """Variant (a): the owner follows the unsolicited link; their browser has no binding."""
    _squatter, token = await sign_up(make_client, mail_dir, SQUATTER_PASSWORD)
    # A forged binding is no better than none.
    owner = await make_client(cookies={"registration_binding": "forged-binding-value"})
    data = await verify(owner, token)
    assert data["hasPasswordLogin"] is False
    assert await has_password_login(owner) is False
    assert await db.fetch_val("SELECT count(*) FROM user_passwords") == 0
    assert await login_status(make_client, VICTIM, SQUATTER_PASSWORD) == 401

    # The owner, signed in, sets a password of their own.
    chosen = await owner.post("/api/v1/auth/password", json={"newPassword": OWNER_PASSWORD})
    assert chosen.status == 200, await chosen.text()
    assert await has_password_login(owner) is True
    assert await login_status(make_client, VICTIM, OWNER_PASSWORD) == 200
    assert await login_status(make_client, VICTIM, SQUATTER_PASSWORD) == 401


@pytest.mark.parametrize("first", ["squatters_link", "owners_link"])
async def test_a_later_sign_up_by_the_owner_keeps_the_squatters_link_harmless(
    make_client: Any, mail_dir: Path, first: str
) -> None:
    """Variant (b): the squatter signed up first, then the owner; both links are used, in
    either order, in the owner's browser."""
    _squatter, squatters_token = await sign_up(make_client, mail_dir, SQUATTER_PASSWORD)
    owner, owners_token = await sign_up(make_client, mail_dir, OWNER_PASSWORD)
    if first == "squatters_link":
        # The earlier link still works, and installs nothing in the owner's browser...
        assert (await verify(owner, squatters_token))["hasPasswordLogin"] is False
        assert await login_status(make_client, VICTIM, SQUATTER_PASSWORD) == 401
        # ...and verifying ended the owner's own link: signed in, they choose a password.
        await error_status(owner, owners_token, 422)
        chosen = await owner.post("/api/v1/auth/password", json={"newPassword": OWNER_PASSWORD})
        assert chosen.status == 200, await chosen.text()
    else:
        assert (await verify(owner, owners_token))["hasPasswordLogin"] is True
        await error_status(owner, squatters_token, 422)  # every link ended with the first
    assert await has_password_login(owner) is True
    assert await login_status(make_client, VICTIM, SQUATTER_PASSWORD) == 401
    assert await login_status(make_client, VICTIM, OWNER_PASSWORD) == 200


async def test_the_newest_link_being_the_squatters_installs_nothing_in_the_owners_browser(
    make_client: Any, mail_dir: Path
) -> None:
    """Variant (c): the owner signed up, then the squatter; the owner uses the newest link in
    their own browser, which holds the owner's binding, not the squatter's."""
    owner, owners_token = await sign_up(make_client, mail_dir, OWNER_PASSWORD)
    _squatter, squatters_token = await sign_up(make_client, mail_dir, SQUATTER_PASSWORD)
    assert last_token(mail_dir, VICTIM) == squatters_token
    data = await verify(owner, squatters_token)
    assert data["hasPasswordLogin"] is False
    assert await login_status(make_client, VICTIM, SQUATTER_PASSWORD) == 401
    assert await login_status(make_client, VICTIM, OWNER_PASSWORD) == 401
    # Verifying ended the owner's own, earlier link too: signed in, they choose a password.
    await error_status(owner, owners_token, 422)
    chosen = await owner.post("/api/v1/auth/password", json={"newPassword": OWNER_PASSWORD})
    assert chosen.status == 200, await chosen.text()
    assert await login_status(make_client, VICTIM, OWNER_PASSWORD) == 200
    assert await login_status(make_client, VICTIM, SQUATTER_PASSWORD) == 401


async def test_a_resent_link_carries_no_squatters_password_to_the_owner(
    make_client: Any, mail_dir: Path
) -> None:
    """The squatter signs up last and asks for a resend: the newest link, used by the owner in
    their browser, still sets no password the squatter knows."""
    owner, _owners_token = await sign_up(make_client, mail_dir, OWNER_PASSWORD)
    squatter, _ = await sign_up(make_client, mail_dir, SQUATTER_PASSWORD)
    await squatter.post("/api/v1/auth/resend-verification", json={"email": VICTIM})
    await mail_sent(squatter)
    assert (await verify(owner, last_token(mail_dir, VICTIM)))["hasPasswordLogin"] is False
    assert await login_status(make_client, VICTIM, SQUATTER_PASSWORD) == 401


async def test_same_browser_sign_up_installs_its_password_and_clears_the_binding(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    browser = await make_client()
    registered = await register(browser, VICTIM, OWNER_PASSWORD)
    binding = set_cookies(registered)["registration_binding"]
    assert "httponly" in binding and binding["samesite"] == "Lax" and binding["path"] == "/"
    assert binding["max-age"] == str(48 * 3600)  # as long as the link lives
    assert len(binding["value"]) >= 43  # 256 random bits
    # Only a keyed hash of the binding is stored, never the value.
    stored = bytes(await db.fetch_val("SELECT binding_hash FROM user_tokens"))
    assert stored == token_hash(SECRET, binding["value"])
    assert binding["value"].encode() not in stored

    response = await browser.post(
        "/auth/verify-email", json={"token": last_token(mail_dir, VICTIM)}
    )
    assert response.status == 200
    assert (await response.json())["data"]["hasPasswordLogin"] is True
    cleared = set_cookies(response)["registration_binding"]
    assert cleared["value"] in ("", '""') and cleared["max-age"] == "0"
    assert "registration_binding" not in {c.key for c in browser.session.cookie_jar}
    assert await has_password_login(browser) is True
    assert await login_status(make_client, VICTIM, OWNER_PASSWORD) == 200


async def test_the_password_itself_installs_it_from_any_browser(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    """Signed up on the laptop, link opened on the phone: {token, password} proves the sign-up."""
    _laptop, token = await sign_up(make_client, mail_dir, OWNER_PASSWORD)
    phone = await make_client()
    # A wrong password (here: another sign-up's) installs nothing and verifies nothing.
    for wrong in (SQUATTER_PASSWORD, OWNER_PASSWORD.upper(), OWNER_PASSWORD + " "):
        refused = await phone.post("/auth/verify-email", json={"token": token, "password": wrong})
        assert refused.status == 422
        error = error_of(await refused.json())
        assert error["code"] == "VALIDATION_ERROR"
        assert set(error["details"]["fields"]) == {"password"}
        assert set(set_cookies(refused)) == set()
    user = await db.fetch_one("SELECT email_verified_at FROM users")
    assert user is not None and user["email_verified_at"] is None
    assert await db.fetch_val("SELECT count(*) FROM user_passwords") == 0
    # The link is still usable, with the right password.
    data = await verify(phone, token, password=OWNER_PASSWORD)
    assert data["hasPasswordLogin"] is True
    assert await login_status(make_client, VICTIM, OWNER_PASSWORD) == 200


async def test_the_squatters_password_with_the_owners_link_is_refused(
    make_client: Any, mail_dir: Path
) -> None:
    """The password must be the link's own sign-up's, not any sign-up's of the address."""
    _squatter, squatters_token = await sign_up(make_client, mail_dir, SQUATTER_PASSWORD)
    _owner, owners_token = await sign_up(make_client, mail_dir, OWNER_PASSWORD)
    anywhere = await make_client()
    refused = await anywhere.post(
        "/auth/verify-email", json={"token": owners_token, "password": SQUATTER_PASSWORD}
    )
    assert refused.status == 422
    assert set(error_of(await refused.json())["details"]["fields"]) == {"password"}
    assert (await verify(anywhere, squatters_token))["hasPasswordLogin"] is False
    assert await login_status(make_client, VICTIM, SQUATTER_PASSWORD) == 401


async def test_a_sign_up_from_another_device_never_invalidates_an_earlier_link(
    make_client: Any, mail_dir: Path
) -> None:
    laptop, laptops_token = await sign_up(make_client, mail_dir, OWNER_PASSWORD)
    _phone, _ = await sign_up(make_client, mail_dir, "the phone sign-up chose this")
    assert (await verify(laptop, laptops_token))["hasPasswordLogin"] is True
    assert await login_status(make_client, VICTIM, OWNER_PASSWORD) == 200


async def test_concurrent_links_of_rival_sign_ups_never_install_the_squatters_password(
    make_client: Any, db: Database, mail_dir: Path
) -> None:
    """Both links used at once in the owner's browser: one owner, one account, no squatter."""
    _squatter, squatters_token = await sign_up(make_client, mail_dir, SQUATTER_PASSWORD)
    owner, owners_token = await sign_up(make_client, mail_dir, OWNER_PASSWORD)
    responses = await asyncio.gather(
        owner.post("/auth/verify-email", json={"token": squatters_token}),
        owner.post("/auth/verify-email", json={"token": owners_token}),
    )
    # One verifies and ends the other (whichever locked the user first).
    assert sorted(r.status for r in responses) == [200, 422]
    owners_won = responses[1].status == 200
    assert await db.fetch_val("SELECT count(*) FROM memberships WHERE role = 'owner'") == 1
    assert await login_status(make_client, VICTIM, SQUATTER_PASSWORD) == 401
    assert await login_status(make_client, VICTIM, OWNER_PASSWORD) == (200 if owners_won else 401)


async def test_login_before_verifying_still_says_verify_first(
    make_client: Any, mail_dir: Path
) -> None:
    """As before: the sign-up's own password answers EMAIL_NOT_VERIFIED, never a session."""
    browser, _ = await sign_up(make_client, mail_dir, OWNER_PASSWORD)
    early = await browser.post(
        "/api/v1/auth/login", json={"email": VICTIM, "password": OWNER_PASSWORD}
    )
    assert early.status == 403
    assert error_of(await early.json())["code"] == "EMAIL_NOT_VERIFIED"
    assert not {"auth_token", "refresh_token"} & set(set_cookies(early))
    wrong = await browser.post("/api/v1/auth/login", json={"email": VICTIM, "password": "nope"})
    assert wrong.status == 401


async def test_the_migration_moves_unproven_passwords_off_unverified_users(
    migrated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sign-ups made before the binding existed put the first password on the user row:
    the migration moves it onto the links that relied on it (no binding, so it installs only
    with {token, password}); a password a reset set (proved the mailbox) and verified users'
    passwords stay."""
    earlier = tmp_path / "sql"
    earlier.mkdir()
    for migration in available_migrations():
        if migration.version < "0091":
            shutil.copy(migration.path, earlier)
    with fresh_database(migrated) as url:
        db = await create_database(url_to_dsn(url), minsize=1, maxsize=2)
        try:
            await migrate(db, earlier)
            squatted, reset, verified = "squatted", "reset", "verified"
            old_hash = await hash_password(SQUATTER_PASSWORD)
            ids = {}
            for name in (squatted, reset, verified):
                ids[name] = await db.fetch_val(
                    "INSERT INTO users (email, email_verified_at) VALUES (%(e)s,"
                    " CASE WHEN %(v)s THEN now() END) RETURNING id",
                    {"e": f"{name}@example.com", "v": name == verified},
                )
                await db.execute(
                    "INSERT INTO user_passwords (user_id, password_hash, created_at, updated_at)"
                    " VALUES (%(u)s, %(h)s, now() - interval '1 hour',"
                    " now() - CASE WHEN %(r)s THEN interval '1 minute' ELSE interval '1 hour' END)",
                    {"u": ids[name], "h": old_hash, "r": name == reset},
                )
            # The squatted address: the first sign-up's link (NULL: "the user's password") and
            # a later sign-up's link carrying its own password.
            await db.execute(
                "INSERT INTO user_tokens (token_hash, user_id, purpose, expires_at, password_hash)"
                " VALUES ('\\x01', %(u)s, 'verify_email', now() + interval '1 day', NULL),"
                " ('\\x02', %(u)s, 'verify_email', now() + interval '1 day', 'later sign-up')",
                {"u": ids[squatted]},
            )
            await migrate(db)

            kept = await db.fetch_all("SELECT user_id FROM user_passwords ORDER BY user_id")
            assert {r["user_id"] for r in kept} == {ids[reset], ids[verified]}
            links = await db.fetch_all(
                "SELECT token_hash, password_hash, binding_hash FROM user_tokens"
                " ORDER BY token_hash"
            )
            assert [(bytes(r["token_hash"]), r["password_hash"]) for r in links] == [
                (b"\x01", old_hash),
                (b"\x02", "later sign-up"),
            ]
            assert all(r["binding_hash"] is None for r in links)
        finally:
            await db.close()
