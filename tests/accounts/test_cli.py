"""`tenantd accounts ...` and `tenantd invitations ...` against the test database."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from tenantd.cli.main import app
from tests.factories import Factory

Invoke = Callable[..., Awaitable[Any]]


@pytest.fixture
def cli(env: dict[str, str]) -> Iterator[Invoke]:
    """Run the CLI in a thread (it runs its own event loop) with the test settings."""
    runner = CliRunner()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # the CLI configures logging; put it back

    async def invoke(*args: str) -> Any:
        wide = {**env, "COLUMNS": "240"}  # rich tables: no wrapping of ids and addresses
        return await asyncio.to_thread(runner.invoke, app, list(args), env=wide)

    yield invoke
    root.handlers[:] = handlers
    root.setLevel(level)


async def test_accounts_list_table_and_json(cli: Invoke, factory: Factory, db: Any) -> None:
    owner = await factory.user(plan="team", password=None)
    gone = await factory.user(password=None)
    await db.execute(
        "UPDATE accounts SET deleted_at = now() WHERE id = %(a)s", {"a": gone.account_id}
    )
    result = await cli("accounts", "list")
    assert result.exit_code == 0, result.output
    assert str(owner.account_id)[:8] in result.output
    assert "team" in result.output
    result = await cli("accounts", "list", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [item["id"] for item in listed] == [str(owner.account_id)]
    assert listed[0] | {"createdAt": None} == {
        "id": str(owner.account_id),
        "name": f"{owner.email} account",
        "plan": "team",
        "seats": 10,
        "seatsUsed": 1,
        "claimedDomain": None,
        "createdAt": None,
        "deletedAt": None,
    }
    result = await cli("accounts", "list", "--json", "--include-deleted")
    assert {item["id"] for item in json.loads(result.stdout)} == {
        str(owner.account_id),
        str(gone.account_id),
    }


async def test_accounts_show(cli: Invoke, factory: Factory) -> None:
    owner = await factory.user(plan="team", password=None)
    result = await cli("accounts", "show", str(owner.account_id), "--json")
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["plan"] == "team" and shown["seats"] == 10 and shown["seatsUsed"] == 1
    assert shown["features"] == {"team_invitations": True}
    assert shown["members"] == [{"userId": str(owner.id), "email": owner.email, "role": "owner"}]
    result = await cli("accounts", "show", str(owner.account_id))
    assert result.exit_code == 0 and owner.email in result.output


async def test_unknown_account_exits_1_and_malformed_id_exits_2(cli: Invoke, db: Any) -> None:
    missing = str(uuid.uuid4())
    for args in (
        ("accounts", "show", missing),
        ("accounts", "set-plan", missing, "team"),
        ("accounts", "set-feature", missing, "team_invitations", "on"),
        ("invitations", "list", missing),
        ("invitations", "revoke", missing),
    ):
        result = await cli(*args)
        assert result.exit_code == 1, (args, result.output)
        assert result.stderr.startswith("error: ")
        assert len(result.stderr.strip().splitlines()) == 1
    for args in (
        ("accounts", "show", "nope"),
        ("invitations", "list", "nope"),
        ("accounts", "show"),
        ("accounts", "frobnicate"),
    ):
        result = await cli(*args)
        assert result.exit_code == 2, (args, result.output)


async def test_set_plan_with_seat_override_and_downgrade(
    cli: Invoke, factory: Factory, db: Any
) -> None:
    owner = await factory.user(plan="team", password=None)
    other = await factory.user(password=None)
    await factory.member(owner.account_id, other.id)
    account = str(owner.account_id)
    result = await cli("accounts", "set-plan", account, "business", "--seats", "25")
    assert result.exit_code == 0, result.output
    row = await db.fetch_one(
        "SELECT plan_code, seats FROM account_plans WHERE account_id = %(a)s",
        {"a": owner.account_id},
    )
    assert (row["plan_code"], row["seats"]) == ("business", 25)
    # Without --seats the plan's own count applies again.
    assert (await cli("accounts", "set-plan", account, "free")).exit_code == 0
    row = await db.fetch_one(
        "SELECT plan_code, seats FROM account_plans WHERE account_id = %(a)s",
        {"a": owner.account_id},
    )
    assert (row["plan_code"], row["seats"]) == ("free", None)
    # The downgrade below the member count removed no one.
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL",
            {"a": owner.account_id},
        )
        == 2
    )
    assert (await cli("accounts", "set-plan", account, "platinum")).exit_code == 1
    assert (await cli("accounts", "set-plan", account, "team", "--seats", "-1")).exit_code == 2
    actions = await db.fetch_all(
        "SELECT data FROM audit_log WHERE action = 'account.plan_changed' ORDER BY id"
    )
    assert [a["data"]["plan"] for a in actions] == ["business", "free"]


async def test_set_feature_on_and_off(cli: Invoke, factory: Factory, db: Any) -> None:
    owner = await factory.user(password=None)  # free plan: no team_invitations
    account = str(owner.account_id)
    assert (await cli("accounts", "set-feature", account, "team_invitations", "on")).exit_code == 0
    shown = json.loads((await cli("accounts", "show", account, "--json")).stdout)
    assert shown["features"]["team_invitations"] is True
    assert (await cli("accounts", "set-feature", account, "team_invitations", "off")).exit_code == 0
    shown = json.loads((await cli("accounts", "show", account, "--json")).stdout)
    assert shown["features"]["team_invitations"] is False
    assert (
        await cli("accounts", "set-feature", account, "team_invitations", "maybe")
    ).exit_code == 2
    assert (await cli("accounts", "set-feature", account, "teleport", "on")).exit_code == 1


async def test_invitations_list_and_revoke(
    cli: Invoke, factory: Factory, db: Any, services: Any
) -> None:
    from tenantd.accounts.invitations import create_invitation
    from tests.accounts.helpers import principal

    owner = await factory.user(plan="team", password=None)
    actor = principal(owner, owner.account_id, "owner")
    issued = await create_invitation(
        services, actor, owner.account_id, email="guest@example.com", role="admin"
    )
    account = str(owner.account_id)
    result = await cli("invitations", "list", account, "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert [(i["id"], i["email"], i["role"]) for i in listed] == [
        (str(issued.invitation["id"]), "guest@example.com", "admin")
    ]
    assert issued.token not in result.stdout
    table = await cli("invitations", "list", account)
    assert table.exit_code == 0 and "guest@example.com" in table.output
    result = await cli("invitations", "revoke", str(issued.invitation["id"]))
    assert result.exit_code == 0, result.output
    assert json.loads((await cli("invitations", "list", account, "--json")).stdout) == []
    assert await db.fetch_val(
        "SELECT revoked_at IS NOT NULL FROM invitations WHERE id = %(i)s",
        {"i": issued.invitation["id"]},
    )


@pytest.mark.parametrize(
    "args",
    [
        ("accounts",),
        ("accounts", "list"),
        ("accounts", "show"),
        ("accounts", "set-plan"),
        ("accounts", "set-feature"),
        ("invitations",),
        ("invitations", "list"),
        ("invitations", "revoke"),
    ],
)
def test_every_command_has_help_with_an_example(args: tuple[str, ...]) -> None:
    result = CliRunner().invoke(app, [*args, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "Example: tenantd " + " ".join(args[:1]) in result.output
