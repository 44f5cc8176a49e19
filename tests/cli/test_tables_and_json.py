"""CLI output (issue 28, part 8): tables never cut an identifier (piped, COLUMNS=80, or an
80-column terminal), `sweep --dry-run` prints its plan once, and `--json` writes what the API
writes (camelCase keys, ISO 8601 dates in UTC with `Z`)."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from rich.console import Console

from tenantd.cli import common
from tests.factories import Factory, run_tenantd
from tests.mfa.helpers import signed_in
from tests.ops.test_cli import run_sql

NARROW = {"COLUMNS": "80"}
API_DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


async def test_keys_list_piped_at_80_columns_shows_every_kid(
    env: dict[str, str], client: Any
) -> None:
    code, _, err = await run_tenantd(env, "keys", "rotate")  # the app made the current one
    assert code == 0, err
    code, out, err = await run_tenantd({**env, **NARROW}, "keys", "list", "--json")
    assert code == 0, err
    keys = json.loads(out)
    assert len(keys) >= 2
    code, table, err = await run_tenantd({**env, **NARROW}, "keys", "list")
    assert code == 0, err
    assert "…" not in table
    for key in keys:
        assert key["kid"] in table  # whole, on one line
        for field in ("publishedAt", "signingFrom"):
            assert API_DATE.match(key[field]), key[field]


async def test_accounts_and_api_keys_lists_piped_at_80_columns_keep_their_ids(
    env: dict[str, str], factory: Factory
) -> None:
    owners = [await factory.user(email=f"long-address-{i}-of-someone@corp.example") for i in (1, 2)]
    code, table, err = await run_tenantd({**env, **NARROW}, "accounts", "list")
    assert code == 0, err
    assert "…" not in table
    for owner in owners:
        assert str(owner.account_id) in table
    code, _, err = await run_tenantd(
        env, "api-keys", "create", "--name", "a rather long key name", "--scopes", "events:read"
    )
    assert code == 0, err
    code, listed, err = await run_tenantd({**env, **NARROW}, "api-keys", "list", "--json")
    [key] = json.loads(listed)
    assert API_DATE.match(key["createdAt"])
    code, table, err = await run_tenantd({**env, **NARROW}, "api-keys", "list")
    assert code == 0, err
    assert key["id"] in table and "…" not in table


def test_an_80_column_terminal_folds_nothing_of_an_id(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    terminal = Console(file=out, force_terminal=True, width=80, color_system=None)
    monkeypatch.setattr(common, "console", terminal)
    kid = "20261127T083000Z-0123456789abcdef0123456789abcdef"
    columns = ("kid", "alg", "state", "published_at", "signing_from", "retired_at", "not_after")
    common.print_table("signing keys", columns, [(kid, "EdDSA", "current", *["2026-11-27"] * 4)])
    text = out.getvalue()
    assert kid in text  # on one line, not shortened
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 80
    # Text, never markup: a name in brackets is printed as it is.
    out.truncate(0)
    common.print_table("t", ("id", "name"), [("x", "[bold]team[/bold]")])
    assert "[bold]team[/bold]" in out.getvalue()


async def test_sweep_dry_run_prints_its_plan_once(
    env: dict[str, str], migrated: str, db: Any
) -> None:
    run_sql(
        migrated,
        "INSERT INTO revoked_tokens (jti, user_id, expires_at)"
        " SELECT gen_random_uuid(), gen_random_uuid(), now() - interval '1 hour'"
        " FROM generate_series(1, 12)",
    )
    code, out, err = await run_tenantd(env, "sweep", "sessions", "--dry-run")
    assert code == 0, err
    assert out.count("revoked_tokens") == 1, out  # the plan's table row, nothing before it
    assert "+12" not in out
    assert re.search(r"revoked_tokens\s*│\s*12\s", out), out
    assert run_sql(migrated, "SELECT count(*) FROM revoked_tokens") == (12,)


async def test_invitations_json_is_the_apis_answer(
    env: dict[str, str], factory: Factory, make_client: Any, db: Any, settings: Any
) -> None:
    owner = await factory.user(plan="team")
    browser = await signed_in(make_client, db, settings, owner)
    created = await browser.post(
        f"/api/v1/accounts/{owner.account_id}/invitations",
        json={"email": "guest@corp.example", "role": "member"},
    )
    assert created.status == 201, await created.text()
    api = (await (await browser.get(f"/api/v1/accounts/{owner.account_id}/invitations")).json())[
        "data"
    ]
    code, out, err = await run_tenantd(env, "invitations", "list", str(owner.account_id), "--json")
    assert code == 0, err
    cli = json.loads(out)
    assert cli == api
    assert API_DATE.match(cli[0]["createdAt"]) and API_DATE.match(cli[0]["expiresAt"])
