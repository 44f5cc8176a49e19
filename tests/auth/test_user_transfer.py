"""`tenantd users import` and `tenantd users export` against the test database: formats of
Clerk, Auth0 and Supabase exports, dry run, idempotent re-runs, bad lines, one transaction
per user, a progress bar on a terminal, and a first sign-in with each imported hash."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import pty
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from tenantd.auth.transfer import service as transfer
from tenantd.bundle import Services
from tenantd.cli.main import app
from tests.auth.test_imported_hashes import DJANGO, FIREBASE_STORED, PHP_BCRYPT
from tests.factories import Factory

REPO = Path(__file__).resolve().parents[2]
Invoke = Callable[..., Awaitable[Any]]


@pytest.fixture
def cli(env: dict[str, str]) -> Iterator[Invoke]:
    """Run the CLI in a thread (it runs its own event loop) with the test settings."""
    runner = CliRunner()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level

    async def invoke(*args: str) -> Any:
        return await asyncio.to_thread(runner.invoke, app, list(args), env=env)

    yield invoke
    root.handlers[:] = handlers
    root.setLevel(level)


def jsonl(path: Path, *records: Any) -> Path:
    lines = [r if isinstance(r, str) else orjson.dumps(r).decode() for r in records]
    path.write_text("\n".join(lines) + "\n")
    return path


async def user_rows(db: Any) -> dict[str, dict[str, Any]]:
    rows = await db.fetch_all(
        "SELECT u.email, u.first_name, u.last_name, u.email_verified_at IS NOT NULL AS verified,"
        " u.created_at, p.password_hash,"
        " (SELECT count(*) FROM memberships m WHERE m.user_id = u.id) AS memberships,"
        " ARRAY(SELECT i.provider || ':' || i.subject FROM user_identities i"
        "  WHERE i.user_id = u.id ORDER BY 1) AS links"
        " FROM users u LEFT JOIN user_passwords p ON p.user_id = u.id"
    )
    return {r["email"]: dict(r) for r in rows}


async def login(client: Any, email: str, password: str) -> int:
    response = await client.post("/api/v1/auth/login", json={"email": email, "password": password})
    return int(response.status)


TENANTD_USERS = [
    {
        "email": "Ada@Example.com",
        "firstName": "Ada",
        "lastName": "Lovelace",
        "emailVerified": True,
        "passwordHash": PHP_BCRYPT,
        "createdAt": "2021-03-04T05:06:07Z",
    },
    {"email": "grace@example.com", "emailVerified": False, "passwordHash": DJANGO},
    {"email": "fb@example.com", "emailVerified": True, "passwordHash": FIREBASE_STORED},
    {"email": "nopass@example.com", "firstName": "No", "emailVerified": True},
]


async def test_import_creates_users_and_each_hash_signs_in_then_is_argon2id(
    cli: Invoke, tmp_path: Path, db: Any, client: Any
) -> None:
    result = await cli("users", "import", str(jsonl(tmp_path / "u.jsonl", *TENANTD_USERS)))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "imported: 4 created, 0 updated, 0 unchanged, 0 skipped"
    rows = await user_rows(db)
    assert set(rows) == {u["email"].lower() for u in TENANTD_USERS}
    ada = rows["ada@example.com"]
    assert (ada["first_name"], ada["last_name"], ada["verified"]) == ("Ada", "Lovelace", True)
    assert ada["created_at"].isoformat() == "2021-03-04T05:06:07+00:00"
    assert ada["password_hash"] == PHP_BCRYPT  # kept as exported until the first sign-in
    assert ada["memberships"] == 1  # a verified user gets a personal account, as at sign-up
    assert rows["grace@example.com"]["verified"] is False
    assert rows["grace@example.com"]["memberships"] == 0
    assert rows["nopass@example.com"]["password_hash"] is None

    assert await login(client, "ada@example.com", "rasmuslerdorf") == 200
    assert await login(client, "fb@example.com", "user1password") == 200
    assert await login(client, "grace@example.com", "lètmein") == 403  # verify the address first
    rows = await user_rows(db)
    assert rows["ada@example.com"]["password_hash"].startswith("$argon2id$")
    assert rows["fb@example.com"]["password_hash"].startswith("$argon2id$")
    assert await login(client, "ada@example.com", "rasmuslerdorf") == 200


async def test_dry_run_reports_and_writes_nothing(cli: Invoke, tmp_path: Path, db: Any) -> None:
    path = jsonl(tmp_path / "u.jsonl", *TENANTD_USERS, "{not json")
    result = await cli("users", "import", str(path), "--dry-run")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "would import: 4 created, 0 updated, 0 unchanged, 1 skipped (dry run: nothing written)"
    )
    assert "line 5: skipped: not JSON" in result.stderr
    for table in ("users", "user_passwords", "accounts", "memberships", "audit_log"):
        assert await db.fetch_val(f"SELECT count(*) FROM {table}") == 0, table


async def test_rerun_is_idempotent_and_fills_in_only_what_is_missing(
    cli: Invoke, tmp_path: Path, db: Any, factory: Factory
) -> None:
    # Already here: signed up with a password of its own, no names.
    existing = await factory.user(email="ada@example.com", password="chosen-here-1")
    path = jsonl(tmp_path / "u.jsonl", *TENANTD_USERS)
    first = await cli("users", "import", str(path))
    assert first.stdout.strip() == "imported: 3 created, 1 updated, 0 unchanged, 0 skipped"
    second = await cli("users", "import", str(path))
    assert second.stdout.strip() == "imported: 0 created, 0 updated, 4 unchanged, 0 skipped"
    rows = await user_rows(db)
    assert len(rows) == 4
    ada = rows["ada@example.com"]
    assert (ada["first_name"], ada["last_name"]) == ("Ada", "Lovelace")  # filled in
    assert ada["password_hash"].startswith("$argon2id$")  # its own password kept
    assert ada["memberships"] == 1
    assert existing.account_id is not None


async def test_concurrent_imports_never_duplicate(
    services: Services, tmp_path: Path, db: Any
) -> None:
    lines = [(n, orjson.dumps(u).decode()) for n, u in enumerate(TENANTD_USERS * 1, start=1)]
    many = [
        (n, orjson.dumps({"email": f"u{n}@example.com", "emailVerified": True}).decode())
        for n in range(1, 21)
    ]
    summaries = await asyncio.gather(
        *(transfer.import_users(services, [*lines, *many], fmt="tenantd") for _ in range(3))
    )
    assert sum(s.created for s in summaries) == 24
    assert all(not s.skipped for s in summaries)
    assert await db.fetch_val("SELECT count(*) FROM users") == 24
    assert await db.fetch_val("SELECT count(*) FROM memberships") == 23  # the verified ones


async def test_bad_lines_are_reported_by_number_and_skipped(
    cli: Invoke, tmp_path: Path, db: Any
) -> None:
    path = jsonl(
        tmp_path / "u.jsonl",
        {"email": "ok1@example.com", "emailVerified": True},
        "[1, 2]",
        {"email": "not-an-address", "emailVerified": True},
        {"email": "x@example.com", "emailVerified": "maybe"},
        {"email": "y@example.com"},
        {"email": "z@example.com", "emailVerified": True, "password": "plain"},
        {"email": "md5@example.com", "emailVerified": True, "passwordHash": "5f4dcc3b5aa765d6"},
        "",
        {"email": "ok2@example.com", "emailVerified": False, "createdAt": "yesterday"},
        {"email": "ok3@example.com", "emailVerified": False},
    )
    result = await cli("users", "import", str(path))
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        "imported: 3 created, 0 updated, 0 unchanged, 6 skipped, 1 warnings"
    )
    assert result.stderr.splitlines() == [
        "line 2: skipped: not a JSON object",
        "line 3: skipped: invalid email: an email address needs an @",
        "line 4: skipped: emailVerified must be true or false",
        "line 5: skipped: emailVerified is required",
        "line 6: skipped: unknown fields: password",
        "line 7: password not imported: unknown password hash scheme",
        "line 9: skipped: createdAt is not an ISO 8601 time",
    ]
    rows = await user_rows(db)
    assert set(rows) == {"ok1@example.com", "md5@example.com", "ok3@example.com"}
    assert rows["md5@example.com"]["password_hash"] is None


async def test_a_user_is_written_whole_or_not_at_all(cli: Invoke, tmp_path: Path, db: Any) -> None:
    # The user's row goes in first; its link then fails in the database (a NUL character):
    # the line is skipped and nothing of that user remains.
    path = jsonl(
        tmp_path / "clerk.jsonl",
        {
            "id": "user_2a",
            "email_addresses": [
                {
                    "id": "idn_1",
                    "email_address": "half@example.com",
                    "verification": {"status": "verified"},
                }
            ],
            "primary_email_address_id": "idn_1",
            "external_accounts": [{"provider": "oauth_google", "provider_user_id": "12\u00003"}],
        },
    )
    result = await cli("users", "import", str(path), "--format", "clerk")
    assert "line 1: skipped: refused by the database" in result.stderr
    assert await db.fetch_val("SELECT count(*) FROM users") == 0
    assert await db.fetch_val("SELECT count(*) FROM accounts") == 0


# --- other products' exports --------------------------------------------------------------

CLERK_LINES = [
    # A row of the dashboard's CSV export.
    {
        "id": "user_2NNEqL2nrIRdJ194ndJqAHwEfxC",
        "first_name": "Clara",
        "last_name": "Clerk",
        "username": None,
        "primary_email_address": "clara@example.com",
        "primary_phone_number": None,
        "verified_email_addresses": "clara@example.com",
        "unverified_email_addresses": "",
        "password_digest": PHP_BCRYPT.replace("$2y$", "$2a$"),
        "password_hasher": "bcrypt",
    },
    # A Backend API user object with a Google account and a Firebase-migrated password.
    {
        "id": "user_2b",
        "object": "user",
        "first_name": "Fred",
        "last_name": None,
        "created_at": 1654012591514,
        "primary_email_address_id": "idn_2",
        "email_addresses": [
            {"id": "idn_1", "email_address": "old@example.com", "verification": None},
            {
                "id": "idn_2",
                "email_address": "fred@example.com",
                "verification": {"status": "verified", "strategy": "from_oauth_google"},
            },
        ],
        "external_accounts": [
            {"provider": "oauth_google", "provider_user_id": "113491985212853472191"},
            {"provider": "oauth_discord", "provider_user_id": "80351110224678912"},
        ],
        "password_digest": "$".join(
            [
                "lSrfV15cpx95/sZS2W9c9Kp6i/LVgQNDNC/qzrCnh1SAyZvqmZqAjTdn3aoItz+VHjoZilo78198JAdRuid5lQ==",
                "42xEC+ixf3L2lw==",
                "jxspr8Ki0RYycVU8zykbdLGjFQ3McFUH0uiiTvC8pVMXAn210wjLNmdZJzxUECKbm0QsEmYUSDzZvpjeJ9WmXA==",
                "Bw==",
                "8",
                "14",
            ]
        ),
        "password_hasher": "scrypt_firebase",
    },
    {
        "id": "user_2c",
        "primary_email_address": "md5@example.com",
        "verified_email_addresses": "",
        "password_digest": "5f4dcc3b5aa765d61d8327deb882cf99",
        "password_hasher": "md5",
    },
]

AUTH0_LINES = [
    # The user export job's line, with the hash of Auth0's password-hash export.
    {
        "user_id": "auth0|5f7c8ec7c33c6c004bbafe82",
        "email": "olive@example.com",
        "email_verified": True,
        "given_name": "Olive",
        "family_name": "Oauth",
        "created_at": "2020-10-06T15:36:07.463Z",
        "identities": [{"provider": "auth0", "user_id": "5f7c8ec7c33c6c004bbafe82"}],
        "passwordHash": PHP_BCRYPT.replace("$2y$", "$2b$"),
    },
    {
        "user_id": "github|583231",
        "email": "octo@example.com",
        "email_verified": True,
        "name": "Mona Lisa Octocat",
        "identities": [{"provider": "github", "user_id": 583231, "isSocial": True}],
    },
    # Auth0's import schema: custom_password_hash.
    {
        "email": "dj@example.com",
        "email_verified": False,
        "custom_password_hash": {"algorithm": "pbkdf2", "hash": {"value": DJANGO}},
    },
]

SUPABASE_LINES = [
    # A row of auth.users.
    {
        "instance_id": "00000000-0000-0000-0000-000000000000",
        "id": "f1f0b7b4-7c1c-4a59-8f1e-3b6f6f0c2a11",
        "aud": "authenticated",
        "role": "authenticated",
        "email": "sam@example.com",
        "encrypted_password": "$2a$10$" + PHP_BCRYPT[7:],
        "email_confirmed_at": "2023-01-02 03:04:05.678+00",
        "raw_user_meta_data": {"full_name": "Sam Supa"},
        "created_at": "2023-01-01 00:00:00+00",
    },
    # A user of the Admin API, signed up with GitLab.
    {
        "id": "0b8f4c1e-1111-2222-3333-444455556666",
        "email": "gitty@example.com",
        "email_confirmed_at": None,
        "user_metadata": {"given_name": "Git", "family_name": "Lab"},
        "identities": [
            {
                "provider": "gitlab",
                "provider_id": "1234567",
                "identity_data": {"sub": "1234567", "email": "gitty@example.com"},
            },
            {"provider": "email", "provider_id": "0b8f4c1e-1111-2222-3333-444455556666"},
        ],
        "created_at": "2024-05-06T07:08:09.123456Z",
    },
]


async def test_clerk_export(cli: Invoke, tmp_path: Path, db: Any, client: Any) -> None:
    path = jsonl(tmp_path / "clerk.jsonl", *CLERK_LINES)
    result = await cli("users", "import", str(path), "--format", "clerk")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("imported: 3 created")
    assert "line 3: password not imported: Clerk hasher 'md5' is not supported" in result.stderr
    rows = await user_rows(db)
    clara, fred = rows["clara@example.com"], rows["fred@example.com"]
    assert (clara["first_name"], clara["last_name"], clara["verified"]) == ("Clara", "Clerk", True)
    assert fred["verified"] is True and fred["links"] == ["google:113491985212853472191"]
    assert fred["created_at"].isoformat().startswith("2022-05-31T15:56:31.514")
    assert rows["md5@example.com"]["verified"] is False
    assert await login(client, "clara@example.com", "rasmuslerdorf") == 200
    assert await login(client, "fred@example.com", "user1password") == 200


async def test_auth0_export(cli: Invoke, tmp_path: Path, db: Any, client: Any) -> None:
    path = jsonl(tmp_path / "auth0.jsonl", *AUTH0_LINES)
    result = await cli("users", "import", str(path), "--format", "auth0")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "imported: 3 created, 0 updated, 0 unchanged, 0 skipped"
    rows = await user_rows(db)
    assert rows["olive@example.com"]["links"] == []  # the database connection is no link
    assert (rows["octo@example.com"]["first_name"], rows["octo@example.com"]["last_name"]) == (
        "Mona",
        "Lisa Octocat",
    )
    assert rows["octo@example.com"]["links"] == ["github:583231"]
    assert rows["dj@example.com"]["password_hash"] == DJANGO
    assert await login(client, "olive@example.com", "rasmuslerdorf") == 200


async def test_supabase_export(cli: Invoke, tmp_path: Path, db: Any, client: Any) -> None:
    path = jsonl(tmp_path / "supabase.jsonl", *SUPABASE_LINES)
    result = await cli("users", "import", str(path), "--format", "supabase")
    assert result.exit_code == 0, result.output
    rows = await user_rows(db)
    sam, gitty = rows["sam@example.com"], rows["gitty@example.com"]
    assert (sam["first_name"], sam["last_name"], sam["verified"]) == ("Sam", "Supa", True)
    assert (gitty["first_name"], gitty["last_name"], gitty["verified"]) == ("Git", "Lab", False)
    assert gitty["links"] == ["gitlab:1234567"]
    assert await login(client, "sam@example.com", "rasmuslerdorf") == 200


async def test_firebase_parameters_as_command_options(
    cli: Invoke, tmp_path: Path, client: Any
) -> None:
    path = jsonl(
        tmp_path / "u.jsonl",
        {
            "email": "fire@example.com",
            "emailVerified": True,
            "passwordHash": "scrypt-firebase$42xEC+ixf3L2lw==$lSrfV15cpx95/sZS2W9c9Kp6i/LVgQNDNC"
            "/qzrCnh1SAyZvqmZqAjTdn3aoItz+VHjoZilo78198JAdRuid5lQ==",
        },
    )
    without = await cli("users", "import", str(path))
    assert "line 1: skipped: scrypt-firebase hash without the project parameters" in (
        without.stderr
    )
    result = await cli(
        "users",
        "import",
        str(path),
        "--firebase-signer-key",
        "jxspr8Ki0RYycVU8zykbdLGjFQ3McFUH0uiiTvC8pVMXAn210wjLNmdZJzxUECKbm0QsEmYUSDzZvpjeJ9WmXA==",
        "--firebase-salt-separator",
        "Bw==",
        "--firebase-rounds",
        "8",
        "--firebase-mem-cost",
        "14",
    )
    assert result.stdout.startswith("imported: 1 created"), result.output
    assert await login(client, "fire@example.com", "user1password") == 200


# --- export -------------------------------------------------------------------------------


async def test_export_writes_the_import_format_and_round_trips(
    cli: Invoke, tmp_path: Path, db: Any, factory: Factory
) -> None:
    await cli("users", "import", str(jsonl(tmp_path / "u.jsonl", *TENANTD_USERS)))
    gone = await factory.user(email="gone@example.com")
    await db.execute("UPDATE users SET deleted_at = now() WHERE id = %(u)s", {"u": gone.id})
    out = tmp_path / "out.jsonl"
    result = await cli("users", "export", "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stderr.strip() == "exported 4 users"
    exported = {r["email"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(exported) == {
        "ada@example.com",
        "grace@example.com",
        "fb@example.com",
        "nopass@example.com",
    }
    assert exported["ada@example.com"] == {
        "email": "ada@example.com",
        "firstName": "Ada",
        "lastName": "Lovelace",
        "emailVerified": True,
        "passwordHash": PHP_BCRYPT,
        "createdAt": "2021-03-04T05:06:07Z",
    }
    assert "passwordHash" not in exported["nopass@example.com"]
    to_stdout = await cli("users", "export")
    assert sorted(to_stdout.stdout.splitlines()) == sorted(out.read_text().splitlines())
    again = await cli("users", "import", str(out))
    assert again.stdout.strip() == "imported: 0 created, 0 updated, 4 unchanged, 0 skipped"


# --- on a terminal ------------------------------------------------------------------------


def test_progress_bar_on_a_terminal_and_summary_line(env: dict[str, str], tmp_path: Path) -> None:
    path = jsonl(
        tmp_path / "u.jsonl",
        *({"email": f"t{n}@example.com", "emailVerified": False} for n in range(30)),
    )
    primary, secondary = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "tenantd", "users", "import", str(path)],
        stdin=subprocess.DEVNULL,
        stdout=secondary,
        stderr=secondary,
        env={
            **env,
            "PATH": os.environ.get("PATH", ""),
            "PYTHONPATH": str(REPO),
            "TERM": "xterm",
            "COLUMNS": "100",
        },
        cwd=tmp_path,
    )
    os.close(secondary)
    output = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    os.close(primary)
    assert process.wait(timeout=60) == 0, output
    text = output.decode(errors="replace")
    assert "━" in text and "importing" in text  # rich's bar, drawn on the terminal
    assert "imported: 30 created, 0 updated, 0 unchanged, 0 skipped" in text
