"""`tenantd keys list|rotate|retire` against the test database."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from tenantd.cli.main import app
from tenantd.db import Database

Invoke = Callable[..., Awaitable[Any]]


@pytest.fixture
def cli(env: dict[str, str]) -> Iterator[Invoke]:
    """Run the CLI in a thread (it runs its own event loop) with the test settings."""
    runner = CliRunner()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    async def invoke(*args: str) -> Any:
        wide = {**env, "COLUMNS": "240"}
        return await asyncio.to_thread(runner.invoke, app, list(args), env=wide)

    yield invoke
    root.handlers[:] = handlers
    root.setLevel(level)


async def listed(cli: Invoke) -> dict[str, dict[str, Any]]:
    result = await cli("keys", "list", "--json")
    assert result.exit_code == 0, result.output
    return {item["kid"]: item for item in json.loads(result.stdout)}


async def test_list_rotate_retire(cli: Invoke, client: Any, db: Database) -> None:
    [(first, key)] = (await listed(cli)).items()  # the running app created it
    assert key["state"] == "current" and key["alg"] == "EdDSA" and key["hasPrivateKey"]

    result = await cli("keys", "rotate")
    assert result.exit_code == 0, result.output
    keys = await listed(cli)
    [new] = set(keys) - {first}
    assert result.output.startswith(f"published {new}")
    assert (keys[first]["state"], keys[new]["state"]) == ("current", "next")
    assert keys[first]["retiredAt"] == keys[new]["signingFrom"]
    table = await cli("keys", "list")
    assert first in table.output and new in table.output and "next" in table.output

    pending = await cli("keys", "rotate")
    assert pending.exit_code == 1 and "pending" in pending.output

    refused = await cli("keys", "retire", first)
    assert refused.exit_code == 1 and "rotate" in refused.output

    result = await cli("keys", "retire", new)
    assert result.exit_code == 0, result.output
    keys = await listed(cli)
    assert (keys[first]["state"], keys[new]["state"]) == ("current", "expired")
    assert keys[first]["retiredAt"] is None

    unknown = await cli("keys", "retire", "no-such-kid")
    assert unknown.exit_code == 1 and "no signing key" in unknown.output


async def test_rotate_in_hs256_mode_is_refused(
    cli: Invoke, env: dict[str, str], db: Database
) -> None:
    env["ACCESS_TOKEN_ALG"] = "HS256"
    result = await cli("keys", "rotate")
    assert result.exit_code == 1 and "HS256" in result.output
    assert await db.fetch_val("SELECT count(*) FROM signing_keys") == 0
