"""Restore a soft-deleted account within the grace period: POST /api/v1/accounts/{id}/restore
(the owner at deletion time) and `tenantd accounts restore ID`; refused when live, past the
window or purged, and when another live account claimed the domain meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import psycopg2.errors
import pytest
from typer.testing import CliRunner

from tenantd.accounts import restore as restore_module
from tenantd.accounts.sweeps import purge_deleted_accounts
from tenantd.bundle import DOMAINS
from tenantd.cli.main import app as cli_app
from tenantd.identity.sessions import issue_session
from tenantd.identity.settings import IdentitySettings
from tests.accounts.helpers import Login, Team, audit_actions
from tests.factories import Factory
from tests.helpers import data, error


def restore_url(account_id: uuid.UUID) -> str:
    return f"/api/v1/accounts/{account_id}/restore"


async def soft_delete(team: Team) -> None:
    await data(await team.owner_client.delete(f"/api/v1/accounts/{team.account_id}"))


async def test_the_owner_restores_within_the_grace_period(
    team: Team, db: Any, login: Login
) -> None:
    await soft_delete(team)
    restored = await data(await team.owner_client.post(restore_url(team.account_id)))
    assert restored["account"]["id"] == str(team.account_id)
    row = await db.fetch_one(
        "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": team.account_id}
    )
    assert row["deleted_at"] is None
    assert (await audit_actions(db, team.account_id))[-1] == "account.restored"
    # Members are back: a fresh token for the account works and lists its members.
    member = await login(team.member, team.account_id)
    members = await data(await member.get(f"/api/v1/accounts/{team.account_id}/members"))
    assert len(members) == 3
    # The owner can switch to it again.
    await data(
        await team.owner_client.post(
            "/api/v1/accounts/switch", json={"accountId": str(team.account_id)}
        )
    )


async def test_only_the_owner_at_deletion_time(team: Team, factory: Factory, login: Login) -> None:
    await soft_delete(team)
    admin = await login(team.admin)
    await error(await admin.post(restore_url(team.account_id)), 403, "FORBIDDEN")
    stranger = await login(await factory.user(password=None))
    await error(await stranger.post(restore_url(team.account_id)), 404, "NOT_FOUND")
    await error(await stranger.post(restore_url(uuid.uuid4())), 404, "NOT_FOUND")


async def test_a_live_account_is_not_restored(team: Team) -> None:
    await error(
        await team.owner_client.post(restore_url(team.account_id)), 409, "ACCOUNT_NOT_DELETED"
    )


async def test_refused_past_the_window_and_after_the_purge(
    team: Team, db: Any, factory: Factory, login: Login
) -> None:
    await soft_delete(team)
    await db.execute(
        "UPDATE accounts SET deleted_at = now() - interval '31 days' WHERE id = %(a)s",
        {"a": team.account_id},
    )
    await error(await team.owner_client.post(restore_url(team.account_id)), 410, "ACCOUNT_PURGED")
    assert await purge_deleted_accounts(db) == 1
    await error(await team.owner_client.post(restore_url(team.account_id)), 410, "ACCOUNT_PURGED")
    # Someone else learns nothing about a purged id.
    stranger = await login(await factory.user(password=None))
    await error(await stranger.post(restore_url(team.account_id)), 404, "NOT_FOUND")


async def claimed_account(factory: Factory, db: Any, domain: str) -> Any:
    owner = await factory.user(email=f"boss-{uuid.uuid4().hex[:6]}@{domain}", password=None)
    await db.execute(
        "UPDATE accounts SET claimed_domain = %(d)s WHERE id = %(a)s",
        {"d": domain, "a": owner.account_id},
    )
    return owner


async def test_refused_when_the_domain_was_claimed_meanwhile(
    factory: Factory, db: Any, login: Login
) -> None:
    owner = await claimed_account(factory, db, "acme.example")
    client = await login(owner)
    await data(await client.delete(f"/api/v1/accounts/{owner.account_id}"))
    await claimed_account(factory, db, "acme.example")  # a later signup took the claim
    refused = await error(await client.post(restore_url(owner.account_id)), 409, "DOMAIN_TAKEN")
    assert refused["details"] == {"domain": "acme.example"}
    row = await db.fetch_one(
        "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": owner.account_id}
    )
    assert row["deleted_at"] is not None


async def test_restore_and_a_claiming_signup_race_to_one_claim(
    factory: Factory, db: Any, login: Login
) -> None:
    owner = await claimed_account(factory, db, "race.example")
    client = await login(owner)
    await data(await client.delete(f"/api/v1/accounts/{owner.account_id}"))
    other = await factory.user(email="second@race.example", password=None)

    async def claim() -> None:
        # The unique index refuses whichever claim comes second.
        with contextlib.suppress(psycopg2.errors.UniqueViolation):
            await db.execute(
                "UPDATE accounts SET claimed_domain = 'race.example' WHERE id = %(a)s",
                {"a": other.account_id},
            )

    restore, _ = await asyncio.gather(client.post(restore_url(owner.account_id)), claim())
    live = await db.fetch_val(
        "SELECT count(*) FROM accounts WHERE lower(claimed_domain) = 'race.example'"
        " AND deleted_at IS NULL"
    )
    assert live == 1
    assert restore.status in (200, 409)


Invoke = Callable[..., Awaitable[Any]]


@pytest.fixture
def cli(env: dict[str, str]) -> Iterator[Invoke]:
    runner = CliRunner()

    async def invoke(*args: str) -> Any:
        return await asyncio.to_thread(runner.invoke, cli_app, list(args), env=env)

    yield invoke


async def test_cli_restore(team: Team, cli: Invoke, db: Any) -> None:
    result = await cli("accounts", "restore", str(team.account_id))
    assert result.exit_code == 1
    assert "not deleted" in result.output
    await soft_delete(team)
    result = await cli("accounts", "restore", str(team.account_id))
    assert result.exit_code == 0, result.output
    assert "restored" in result.output
    assert await db.fetch_val(
        "SELECT deleted_at IS NULL FROM accounts WHERE id = %(a)s", {"a": team.account_id}
    )
    actions = await db.fetch_all(
        "SELECT action, actor_user_id FROM audit_log WHERE account_id = %(a)s"
        " AND action = 'account.restored'",
        {"a": team.account_id},
    )
    assert actions == [{"action": "account.restored", "actor_user_id": None}]
    missing = await cli("accounts", "restore", str(uuid.uuid4()))
    assert missing.exit_code == 1
    assert (await cli("accounts", "restore", "not-a-uuid")).exit_code == 2


async def test_restore_needs_a_recent_authentication(
    team: Team, db: Any, make_client: Any, settings: Any
) -> None:
    await soft_delete(team)

    async def browser(auth_age: float) -> Any:
        # No active account: the owner's only account is the deleted one.
        client = await make_client()
        async with db.connection() as conn:
            issued = await issue_session(
                conn,
                settings,
                keyring=client.server.app[DOMAINS].identity.keyring,
                user_id=team.owner.id,
                account_id=None,
                auth_time=time.time() - auth_age,
            )
        client.session.cookie_jar.update_cookies(
            {"auth_token": issued.access_token, "refresh_token": issued.refresh_token},
            response_url=client.make_url("/"),
        )
        return client

    stale = await browser(settings.section(IdentitySettings).reauth_max_age_seconds + 60)
    body = await error(await stale.post(restore_url(team.account_id)), 403, "REAUTH_REQUIRED")
    assert body["details"]["methods"] == []  # no password: signing in again is the way
    row = await db.fetch_one(
        "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": team.account_id}
    )
    assert row["deleted_at"] is not None
    await data(await (await browser(0)).post(restore_url(team.account_id)))


async def test_restore_emits_account_restored_in_its_transaction(
    team: Team, db: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    await soft_delete(team)
    start = await db.fetch_val("SELECT coalesce(max(id), 0) FROM outbox_events")
    deleted_at = await db.fetch_val(
        "SELECT deleted_at FROM accounts WHERE id = %(a)s", {"a": team.account_id}
    )

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("boom")

    # Fails after the event was written, inside the restore's transaction: nothing is left.
    monkeypatch.setattr(restore_module.log, "info", broken)
    assert (await team.owner_client.post(restore_url(team.account_id))).status == 500
    assert (
        await db.fetch_val("SELECT count(*) FROM outbox_events WHERE id > %(s)s", {"s": start}) == 0
    )
    monkeypatch.undo()
    await data(await team.owner_client.post(restore_url(team.account_id)))
    [event] = await db.fetch_all(
        "SELECT type, account_id, actor_id, data, previous FROM outbox_events WHERE id > %(s)s",
        {"s": start},
    )
    assert event["type"] == "account.restored"
    assert event["account_id"] == team.account_id
    assert event["actor_id"] == str(team.owner.id)
    assert event["data"]["id"] == str(team.account_id)
    assert event["data"]["deletedAt"] is None
    assert event["previous"]["deletedAt"] is not None
    assert event["previous"]["deletedAt"][:19] == deleted_at.isoformat()[:19]
