"""Sensitive actions (issue 25): adding a factor needs a recent sign-in like removing one;
every sensitive action writes a security event and mails a notice whose "This wasn't me"
link undoes it (a factor an attacker added is removed, a removed one comes back, ...) and
ends every session."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import aiohttp
import pyotp
import pytest
from aiohttp import web

from tenantd.app.factory import create_app
from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.identity.errors import InvalidCredentials
from tenantd.identity.settings import IdentitySettings
from tenantd.jobs.kinds import JobInfo, PermanentJobError
from tenantd.mfa import sensitive
from tenantd.mfa import service as mfa
from tenantd.mfa.domain import mfa_of
from tenantd.settings import Settings
from tenantd.web.spec import Access, Routes
from tests.auth.helpers import link_token, mails_to
from tests.factories import Factory, UserRecord, mail_text
from tests.helpers import ORIGIN, data, error, eventually
from tests.mfa.helpers import Enrolled, enrol_totp, signed_in
from tests.mfa.soft_authenticator import SoftAuthenticator

STALE = 3600.0  # seconds since the sign-in: far past REAUTH_MAX_AGE_SECONDS (600)


async def notice(client: Any, mail_dir: Path, user: UserRecord, action: sensitive.Sensitive) -> str:
    """The token of the "This wasn't me" link of `action`'s notice (waits for the job)."""
    await client.server.app[DOMAINS].jobs.drain(10)

    def found() -> list[Any]:
        return [m for m in mails_to(mail_dir, user.email) if m["Subject"] == action.label]

    [message] = await eventually(found)
    assert "wasn't you" in mail_text(message)
    return link_token(message, sensitive.UNDO_PATH)


async def undo(client: Any, token: str) -> None:
    await data(await client.post("/api/v1/auth/security/undo", json={"token": token}))


async def events(db: Database, user: UserRecord) -> list[str]:
    rows = await db.fetch_all(
        "SELECT type FROM security_events WHERE user_id = %(u)s ORDER BY id", {"u": user.id}
    )
    return [row["type"] for row in rows]


async def signed_out(client: Any) -> None:
    """Every session ended: the browser's token is refused."""
    await error(await client.get("/api/v1/auth/mfa/status"), 401)


def authenticator(settings: Settings) -> SoftAuthenticator:
    return SoftAuthenticator(
        rp_id=settings.section(IdentitySettings).webauthn_rp_id,
        origin=settings.section(IdentitySettings).webauthn_origins[0],
    )


async def register_passkey(client: Any, key: SoftAuthenticator) -> dict[str, Any]:
    options = await data(await client.post("/api/v1/auth/passkeys/register/options"))
    return dict(
        await data(
            await client.post(
                "/api/v1/auth/passkeys/register/verify",
                json={"credential": key.create(options), "name": "attacker"},
            ),
            201,
        )
    )


async def passwordless(make_client: Any, key: SoftAuthenticator) -> Any:
    browser = await make_client()
    options = await data(await browser.post("/api/v1/auth/passkeys/authenticate/options", json={}))
    return await browser.post(
        "/api/v1/auth/passkeys/authenticate/verify", json={"credential": key.get(options)}
    )


# -- item 1: adding a factor needs step-up -------------------------------------------------------


async def test_a_stale_session_cannot_add_a_factor(
    make_client: Any, factory: Factory, db: Database, settings: Settings
) -> None:
    user = await factory.user()
    stale = await signed_in(make_client, db, settings, user, auth_age=STALE)
    fresh = await signed_in(make_client, db, settings, user)
    await error(await stale.post("/api/v1/auth/mfa/totp/setup"), 403, "REAUTH_REQUIRED")
    await error(await stale.post("/api/v1/auth/passkeys/register/options"), 403, "REAUTH_REQUIRED")
    # Options fetched by a fresh session do not let a stale one finish either.
    setup = await data(await fresh.post("/api/v1/auth/mfa/totp/setup"))
    code = pyotp.TOTP(setup["secret"]).now()
    await error(
        await stale.post("/api/v1/auth/mfa/totp/confirm", json={"code": code}),
        403,
        "REAUTH_REQUIRED",
    )
    key = authenticator(settings)
    options = await data(await fresh.post("/api/v1/auth/passkeys/register/options"))
    await error(
        await stale.post(
            "/api/v1/auth/passkeys/register/verify", json={"credential": key.create(options)}
        ),
        403,
        "REAUTH_REQUIRED",
    )
    summary = await db.fetch_one(
        "SELECT mfa_enabled, (SELECT count(*) FROM passkeys WHERE user_id = u.id) AS passkeys,"
        " (SELECT count(*) FROM mfa_recovery_codes WHERE user_id = u.id) AS codes"
        " FROM users u WHERE id = %(u)s",
        {"u": user.id},
    )
    assert summary == {"mfa_enabled": False, "passkeys": 0, "codes": 0}


async def test_an_added_authenticator_app_is_announced_and_its_link_removes_it(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    user = await factory.user()
    attacker = await signed_in(make_client, db, settings, user)
    owner = await signed_in(make_client, db, settings, user)
    await enrol_totp(attacker)
    assert sensitive.TOTP_ADDED.name in await events(db, user)
    token = await notice(attacker, mail_dir, user, sensitive.TOTP_ADDED)
    await undo(await make_client(), token)
    status = await db.fetch_one(
        "SELECT mfa_enabled, EXISTS (SELECT 1 FROM mfa_totp WHERE user_id = u.id) AS totp,"
        " (SELECT count(*) FROM mfa_recovery_codes WHERE user_id = u.id) AS codes"
        " FROM users u WHERE id = %(u)s",
        {"u": user.id},
    )
    assert status == {"mfa_enabled": False, "totp": False, "codes": 0}
    await signed_out(attacker)
    await signed_out(owner)
    assert (await events(db, user))[-1] == "action_undone"
    # The owner's password sign-in asks for no factor again.
    answer = await data(
        await (await make_client()).post(
            "/api/v1/auth/login", json={"email": user.email, "password": user.password}
        )
    )
    assert "mfaRequired" not in answer
    # Once.
    await error(
        await (await make_client()).post("/api/v1/auth/security/undo", json={"token": token}),
        422,
    )


async def test_an_added_passkey_is_announced_and_its_link_removes_it(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    user = await factory.user()
    attacker = await signed_in(make_client, db, settings, user)
    key = authenticator(settings)
    registered = await register_passkey(attacker, key)
    assert len(registered["recoveryCodes"]) == 10
    await data(await passwordless(make_client, key))  # the passkey signs in
    assert sensitive.PASSKEY_ADDED.name in await events(db, user)
    await undo(await make_client(), await notice(attacker, mail_dir, user, sensitive.PASSKEY_ADDED))
    await signed_out(attacker)
    assert (
        await db.fetch_val("SELECT count(*) FROM passkeys WHERE user_id = %(u)s", {"u": user.id})
        == 0
    )
    await error(await passwordless(make_client, key), 401)


async def test_a_removed_factor_comes_back_with_the_link(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    enrolled: Enrolled = await enrol_totp(browser)
    key = authenticator(settings)
    passkey = (await register_passkey(browser, key))["passkey"]
    await data(await browser.delete(f"/api/v1/auth/passkeys/{passkey['id']}"))
    await error(await passwordless(make_client, key), 401)
    await undo(
        await make_client(), await notice(browser, mail_dir, user, sensitive.PASSKEY_REMOVED)
    )
    await data(await passwordless(make_client, key))  # back, the same credential

    browser = await signed_in(make_client, db, settings, user)
    await data(await browser.delete("/api/v1/auth/mfa/totp"))
    await undo(await make_client(), await notice(browser, mail_dir, user, sensitive.TOTP_REMOVED))
    again = await signed_in(make_client, db, settings, user, auth_age=STALE)
    await data(await again.post("/api/v1/auth/reauth", json={"totp": enrolled.code(+1)}))


async def test_regenerated_recovery_codes_are_undone(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    enrolled = await enrol_totp(browser)
    new = await data(await browser.post("/api/v1/auth/mfa/recovery-codes/regenerate"))
    await undo(
        await make_client(),
        await notice(browser, mail_dir, user, sensitive.RECOVERY_CODES_REGENERATED),
    )
    services = mfa_of(browser.server.app)
    old = enrolled.recovery_codes[0]
    assert await mfa.check_code(services, user.id, recovery_code=old) == mfa.AMR_OTP
    with pytest.raises(InvalidCredentials):
        await mfa.check_code(services, user.id, recovery_code=new["recoveryCodes"][0])


async def test_a_password_change_is_undone_by_removing_the_password(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    user = await factory.user()
    attacker = await signed_in(make_client, db, settings, user)
    chosen = "the attacker's new passphrase"
    await data(
        await attacker.post(
            "/api/v1/auth/password", json={"currentPassword": user.password, "newPassword": chosen}
        )
    )
    token = await notice(attacker, mail_dir, user, sensitive.PASSWORD_CHANGED)
    assert "Forgot password" in sensitive.PASSWORD_CHANGED.undo
    await undo(await make_client(), token)
    await signed_out(attacker)
    for password in (chosen, user.password):
        await error(
            await (await make_client()).post(
                "/api/v1/auth/login", json={"email": user.email, "password": password}
            ),
            401,
        )


async def test_account_deletion_and_ownership_transfer_are_undone(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    owner = await factory.user()
    member = await factory.user()
    assert owner.account_id is not None
    await db.execute(
        "INSERT INTO memberships (account_id, user_id, role) VALUES (%(a)s, %(u)s, 'member')",
        {"a": owner.account_id, "u": member.id},
    )
    browser = await signed_in(make_client, db, settings, owner)
    account = f"/api/v1/accounts/{owner.account_id}"
    await data(await browser.post(f"{account}/transfer-ownership", json={"userId": str(member.id)}))
    await undo(
        await make_client(), await notice(browser, mail_dir, owner, sensitive.OWNERSHIP_TRANSFERRED)
    )
    roles = await db.fetch_all(
        "SELECT user_id, role FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL",
        {"a": owner.account_id},
    )
    assert {r["user_id"]: r["role"] for r in roles} == {owner.id: "owner", member.id: "admin"}

    browser = await signed_in(make_client, db, settings, owner)
    await data(await browser.delete(account))
    await undo(
        await make_client(), await notice(browser, mail_dir, owner, sensitive.ACCOUNT_DELETED)
    )
    assert (
        await db.fetch_val(
            "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": owner.account_id}
        )
        is None
    )
    await signed_out(browser)


async def test_an_unknown_undo_token_is_refused(make_client: Any) -> None:
    client = await make_client()
    await error(
        await client.post("/api/v1/auth/security/undo", json={"token": uuid.uuid4().hex}), 422
    )


async def test_a_deleted_user_comes_back_with_the_link(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    await data(await browser.delete("/api/v1/users/me"))
    token = await notice(browser, mail_dir, user, sensitive.USER_DELETED)  # the released address
    await undo(await make_client(), token)
    row = await db.fetch_one(
        "SELECT email, deleted_at, (SELECT deleted_at FROM accounts WHERE id = %(a)s) AS gone,"
        " (SELECT role FROM memberships WHERE account_id = %(a)s AND user_id = u.id"
        "  AND revoked_at IS NULL) AS role FROM users u WHERE id = %(u)s",
        {"u": user.id, "a": user.account_id},
    )
    assert row == {"email": user.email, "deleted_at": None, "gone": None, "role": "owner"}
    # No password (it was dropped with the user): "Forgot password" is the way back in.
    await error(
        await (await make_client()).post(
            "/api/v1/auth/login", json={"email": user.email, "password": user.password}
        ),
        401,
    )


async def test_restore_and_mfa_policy_changes_are_undone(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    owner = await factory.user()
    await enrol_totp(await signed_in(make_client, db, settings, owner))
    # Switched on from a session that used the factor (one that used none is refused it).
    browser = await signed_in(make_client, db, settings, owner, amr=("pwd", "otp"))
    account = f"/api/v1/accounts/{owner.account_id}"
    await data(await browser.patch(account, json={"requireMfa": True}))
    await undo(
        await make_client(), await notice(browser, mail_dir, owner, sensitive.MFA_POLICY_CHANGED)
    )
    required = await db.fetch_val(
        "SELECT require_mfa FROM accounts WHERE id = %(a)s", {"a": owner.account_id}
    )
    assert required is False

    browser = await signed_in(make_client, db, settings, owner)
    await data(await browser.delete(account))
    restorer = browser  # its session moved out of the deleted account
    await data(await restorer.post(f"{account}/restore"))
    await undo(
        await make_client(), await notice(restorer, mail_dir, owner, sensitive.ACCOUNT_RESTORED)
    )
    deleted_at = await db.fetch_val(
        "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": owner.account_id}
    )
    assert deleted_at is not None
    # Deleted again as any deletion is: the event and the audit row say when it is purged.
    deletions = await db.fetch_all(
        "SELECT data FROM outbox_events WHERE type = 'account.deleted' AND account_id = %(a)s"
        " ORDER BY id",
        {"a": owner.account_id},
    )
    assert len(deletions) == 2 and all(row["data"]["purgeAfter"] for row in deletions)
    audited = await db.fetch_all(
        "SELECT data FROM audit_log WHERE action = 'account.soft_deleted' AND account_id = %(a)s"
        " ORDER BY created_at",
        {"a": owner.account_id},
    )
    assert [row["data"].get("reason") for row in audited] == [None, "undo"]
    assert all(row["data"]["purgeAfter"] for row in audited)


async def test_an_action_cannot_be_performed_without_its_guard(
    make_client: Any, factory: Factory, db: Database
) -> None:
    """`performed` refuses (a server error) unless `require` ran for that action first, so a
    function that forgets the guard fails loudly instead of acting."""
    user = await factory.user()
    services = (await make_client()).server.app[DOMAINS]
    with pytest.raises(sensitive.UnguardedAction):
        async with db.transaction() as conn:
            await sensitive.performed(
                services,
                conn,
                actor=sensitive.OPERATOR,
                action=sensitive.TOTP_ADDED,
                user_id=user.id,
            )
    await sensitive.require(services, sensitive.OPERATOR, sensitive.TOTP_ADDED)
    async with db.transaction() as conn:
        await sensitive.performed(
            services, conn, actor=sensitive.OPERATOR, action=sensitive.TOTP_ADDED, user_id=user.id
        )
    # Used up: the guard covers one performance.
    assert not sensitive.guard_ran(sensitive.TOTP_ADDED)
    assert sensitive.TOTP_ADDED.name in await events(db, user)


async def test_an_undo_link_used_concurrently_undoes_once(
    make_client: Any, factory: Factory, db: Database, settings: Settings, mail_dir: Path
) -> None:
    """Eight browsers open the same "This wasn't me" link at once: the row is locked and
    re-read (used_at), so exactly one undoes, the others are told the link is used, none
    fails, and one undo is recorded."""
    owner = await factory.user()
    browser = await signed_in(make_client, db, settings, owner)
    await data(await browser.delete(f"/api/v1/accounts/{owner.account_id}"))
    token = await notice(browser, mail_dir, owner, sensitive.ACCOUNT_DELETED)
    clients = [await make_client() for _ in range(8)]
    answers = await asyncio.gather(
        *(c.post("/api/v1/auth/security/undo", json={"token": token}) for c in clients)
    )
    assert sorted(a.status for a in answers) == [200] + [422] * 7
    assert (await events(db, owner)).count("action_undone") == 1
    undone = await db.fetch_val(
        "SELECT count(*) FROM audit_log WHERE action = 'security.action_undone' AND target = %(u)s",
        {"u": str(owner.id)},
    )
    assert undone == 1


GUARD_PROBE = Routes("tests")


@GUARD_PROBE.route("POST", "/test/guard", access=Access.PUBLIC, wrapped=False)
async def _guard_set(request: web.Request) -> dict[str, Any]:
    """Runs a guard and performs nothing (as an action refused after its guard does)."""
    await sensitive.require(request.app[DOMAINS], sensitive.OPERATOR, sensitive.TOTP_ADDED)
    return await _guard_seen(request)


@GUARD_PROBE.route("GET", "/test/guard", access=Access.PUBLIC, wrapped=False)
async def _guard_seen(request: web.Request) -> dict[str, Any]:
    assert request.transport is not None
    client = request.transport.get_extra_info("peername")
    return {"ran": sensitive.guard_ran(sensitive.TOTP_ADDED), "client": list(client)}


async def test_a_guard_does_not_outlive_its_request_on_a_kept_alive_connection(
    settings: Settings, migrated: str, aiohttp_server: Any
) -> None:
    """The guard is remembered per task; aiohttp serves each request of a connection in a
    task of its own (a copy of the connection's context), so a guard that ran in one request
    and was not used is gone in the next request on the same connection."""
    server = await aiohttp_server(create_app(settings, migrated, extra_routes=[GUARD_PROBE]))
    connector = aiohttp.TCPConnector(limit=1)  # one connection, kept alive
    async with aiohttp.ClientSession(connector=connector) as session:
        url = server.make_url("/test/guard")
        async with session.post(url, headers={"Origin": ORIGIN}) as first:
            assert first.status == 200, await first.text()
            before = await first.json()
        async with session.get(url) as second:
            after = await second.json()
    assert before["ran"] is True and after["ran"] is False
    assert before["client"] == after["client"]  # one connection: the same client port


@pytest.mark.parametrize("payload", [{}, {"undoId": "not-a-uuid"}])
async def test_a_malformed_notice_job_fails_for_good(payload: dict[str, Any]) -> None:
    job = JobInfo(id=None, kind=sensitive.NOTICE_JOB, attempts=1, max_attempts=5)
    with pytest.raises(PermanentJobError, match="malformed security notice job"):
        await sensitive.run_notice(None, payload, job)  # type: ignore[arg-type]  # never reached
