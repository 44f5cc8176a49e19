"""`tenantd suppress add|remove|list|check` against the test database (Typer's CliRunner)."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tenantd.cli.main import app
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tests.helpers import SECRET, truncate_all

runner = CliRunner()


def sql(url: str, statement: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    async def run() -> list[dict[str, Any]]:
        db = await create_database(url_to_dsn(url), minsize=1, maxsize=1)
        try:
            if statement == "TRUNCATE":
                await truncate_all(db)
                return []
            if statement.lstrip().upper().startswith("SELECT"):
                return await db.fetch_all(statement, params)
            await db.execute(statement, params)
            return []
        finally:
            await db.close()

    return asyncio.run(run())


@pytest.fixture
def cli_env(migrated: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    sql(migrated, "TRUNCATE")
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level  # the CLI configures logging; put it back
    yield {
        "DATABASE_URL": migrated,
        "TENANTD_DATA_DIR": str(tmp_path),
        "SECRET_KEY": SECRET,
        "EMAIL_PROVIDER": "file",
        "LOG_LEVEL": "warning",
    }
    root.handlers[:] = handlers
    root.setLevel(level)


def invoke(env: dict[str, str], *args: str) -> Any:
    return runner.invoke(app, ["suppress", *args], env=env)


def table(url: str) -> list[dict[str, Any]]:
    return sql(url, "SELECT email, reason, provider FROM email_suppressions ORDER BY email")


def test_add_check_remove_round_trip(cli_env: dict[str, str], migrated: str) -> None:
    result = invoke(cli_env, "check", "bob@example.com")
    assert result.exit_code == 0, result.output
    assert "not suppressed" in result.output

    result = invoke(cli_env, "add", "  Bob@EXAMPLE.com ")
    assert result.exit_code == 0, result.output
    assert table(migrated) == [
        {"email": "bob@example.com", "reason": "manual", "provider": "manual"}
    ]

    result = invoke(cli_env, "check", "Bob@example.COM")
    assert result.exit_code == 1
    assert "bob@example.com" in result.output and "manual" in result.output

    result = invoke(cli_env, "remove", "Bob@Example.com")
    assert result.exit_code == 0, result.output
    assert table(migrated) == []
    assert invoke(cli_env, "check", "Bob@example.com").exit_code == 0


def test_check_finds_the_row_whatever_the_spelling(cli_env: dict[str, str], migrated: str) -> None:
    # INTERFACE.md: `tenantd suppress check Bob@Example.COM` finds the row of bob@example.com.
    sql(
        migrated,
        "INSERT INTO email_suppressions (email, reason, provider)"
        " VALUES ('bob@example.com', 'complaint', 'sendgrid'),"
        " ('eve@xn--exmple-cua.com', 'hard_bounce', 'resend')",
    )
    for spelling in ("Bob@Example.COM", "BOB@example.com.", " bob@EXAMPLE.com "):
        result = invoke(cli_env, "check", spelling, "--json")
        assert result.exit_code == 1, (spelling, result.output)
        assert json.loads(result.stdout)["email"] == "bob@example.com"
    result = invoke(cli_env, "check", "Eve@EXÄMPLE.com.", "--json")
    assert result.exit_code == 1, result.output
    assert json.loads(result.stdout)["email"] == "eve@xn--exmple-cua.com"
    # Adding another spelling of a suppressed address is "already suppressed", not a new row.
    again = invoke(cli_env, "add", "BOB@Example.com")
    assert again.exit_code == 1 and "already suppressed" in again.output
    assert invoke(cli_env, "remove", "Eve@Exämple.COM").exit_code == 0
    assert table(migrated) == [
        {"email": "bob@example.com", "reason": "complaint", "provider": "sendgrid"}
    ]


def test_add_with_a_reason_and_adding_twice_is_refused(
    cli_env: dict[str, str], migrated: str
) -> None:
    assert invoke(cli_env, "add", "c@example.com", "--reason", "complaint").exit_code == 0
    again = invoke(cli_env, "add", "c@example.com", "--reason", "hard_bounce")
    assert again.exit_code == 1
    assert "already suppressed" in again.output
    assert table(migrated) == [
        {"email": "c@example.com", "reason": "complaint", "provider": "manual"}
    ]


def test_remove_of_a_missing_row_exits_1(cli_env: dict[str, str]) -> None:
    result = invoke(cli_env, "remove", "nobody@example.com")
    assert result.exit_code == 1
    assert "not suppressed" in result.output


@pytest.mark.parametrize(
    "args",
    [
        ("add", "not-an-address"),
        ("add", "x@example.com", "--reason", "because"),
        ("check", "@example.com"),
        ("add", "a@ex\u200dample.com"),  # a joiner IDNA refuses
        ("check", "a@exa..mple.com"),
        ("list", "--provider", "mailgun"),
        ("list", "--reason", "soft_bounce"),
    ],
)
def test_bad_usage_exits_2(cli_env: dict[str, str], migrated: str, args: tuple[str, ...]) -> None:
    result = invoke(cli_env, *args)
    assert result.exit_code == 2, result.output
    assert table(migrated) == []


def seed(url: str) -> None:
    for email, reason, provider in [
        ("a@example.com", "hard_bounce", "sendgrid"),
        ("b@example.com", "complaint", "resend"),
        ("c@example.com", "inactive", "postmark"),
        ("d@example.com", "hard_bounce", "resend"),
        ("e@example.com", "manual", "manual"),
    ]:
        sql(
            url,
            "INSERT INTO email_suppressions (email, reason, provider) VALUES (%(e)s, %(r)s, %(p)s)",
            {"e": email, "r": reason, "p": provider},
        )


def test_list_json_and_filters(cli_env: dict[str, str], migrated: str) -> None:
    seed(migrated)
    result = invoke(cli_env, "list", "--json")
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert {row["email"] for row in listed} == {f"{c}@example.com" for c in "abcde"}
    assert set(listed[0]) == {"email", "reason", "provider", "createdAt"}

    by_provider = json.loads(invoke(cli_env, "list", "--provider", "resend", "--json").stdout)
    assert sorted(r["email"] for r in by_provider) == ["b@example.com", "d@example.com"]

    by_reason = json.loads(invoke(cli_env, "list", "--reason", "hard_bounce", "--json").stdout)
    assert sorted(r["email"] for r in by_reason) == ["a@example.com", "d@example.com"]

    both = invoke(cli_env, "list", "--provider", "resend", "--reason", "hard_bounce", "--json")
    assert [r["email"] for r in json.loads(both.stdout)] == ["d@example.com"]


def test_list_table_shows_every_column(cli_env: dict[str, str], migrated: str) -> None:
    seed(migrated)
    result = invoke(cli_env, "list", "--provider", "postmark")
    assert result.exit_code == 0, result.output
    for text in ("email", "reason", "provider", "created_at", "c@example.com", "inactive"):
        assert text in result.output
    assert "a@example.com" not in result.output


def test_check_json(cli_env: dict[str, str], migrated: str) -> None:
    seed(migrated)
    result = invoke(cli_env, "check", "b@example.com", "--json")
    assert result.exit_code == 1
    row = json.loads(result.stdout)
    assert (row["email"], row["reason"], row["provider"]) == (
        "b@example.com",
        "complaint",
        "resend",
    )
    free = invoke(cli_env, "check", "z@example.com", "--json")
    assert free.exit_code == 0 and json.loads(free.stdout) is None


@pytest.mark.parametrize("command", ["add", "remove", "list", "check"])
def test_help_has_an_example(command: str) -> None:
    result = runner.invoke(app, ["suppress", command, "--help"])
    assert result.exit_code == 0
    assert f"Example: tenantd suppress {command}" in result.output
