"""`tenantd directories`: an account's SCIM directories, as the API's owners and admins see
them; `create` prints the directory's id and its bearer token (shown only this once)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer

from tenantd.cli.common import fail, group, print_json, print_table, with_services
from tenantd.db import Row
from tenantd.directories import queries, service
from tenantd.directories.domain import Directories
from tenantd.errors import NotFound, ValidationFailed

app = group(
    "directories",
    "SCIM directories of an account (Okta, Entra ID, ...): each has a bearer token.",
    "tenantd directories create 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80 --name Okta",
)


T = TypeVar("T")


def run(work: Callable[[Directories], Awaitable[T]]) -> T:
    """A call on the directories domain."""
    return with_services(lambda domains: work(domains.directories))


def _account(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        fail(f"not a valid account id: {value!r}", 2)


def _json_row(row: Row, base_url: str) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "accountId": str(row["account_id"]),
        "name": row["name"],
        "scimBaseUrl": f"{base_url}/scim/v2/{row['id']}",
        "createdAt": row["created_at"],
        "lastUsedAt": row["last_used_at"],
    }


@app.command()
def create(
    account_id: str = typer.Argument(..., help="The account's id (tenantd accounts list)."),
    name: str = typer.Option("", "--name", help="What the directory is (Okta, Entra ID, ...)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object instead of two lines."),
) -> None:
    """Create a directory; print its id, then its bearer token (shown only this once).

    Example: read -r ID TOKEN <<< "$(tenantd directories create 3f2b9c1e-... | paste -sd' ')"
    """
    account = _account(account_id)
    base_url = ""

    async def work(services: Directories) -> service.Created:
        nonlocal base_url
        base_url = services.settings.public_base_url
        return await service.create_directory_as_operator(services, account, name=name)

    try:
        created = run(work)
    except NotFound:
        fail(f"no live account {account}")
    except ValidationFailed as error:
        fail("; ".join(f"{k}: {v}" for k, v in error.fields.items()), 2)
    row = created.directory
    if as_json:
        print_json({**_json_row(row, base_url), "token": created.token})
        return
    sys.stdout.write(f"{row['id']}\n{created.token}\n")
    sys.stderr.write(
        f"created directory {row['id']}: SCIM URL {base_url}/scim/v2/{row['id']};"
        " the token above is shown only this once\n"
    )


@app.command("list")
def list_(
    account_id: str = typer.Argument(..., help="The account's id."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array instead of a table."),
) -> None:
    """List an account's directories: id, name, SCIM URL, created, last used. No token.

    Example: tenantd directories list 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80
    """
    account = _account(account_id)
    base_url = ""

    async def work(services: Directories) -> list[Row]:
        nonlocal base_url
        base_url = services.settings.public_base_url
        async with services.db.connection() as conn:
            return await queries.list_directories(conn, account)

    rows = run(work)
    items = [_json_row(row, base_url) for row in rows]
    if as_json:
        print_json(items)
        return
    print_table(
        "Directories",
        ("id", "name", "scim_base_url", "created_at", "last_used_at"),
        [
            [item["id"], item["name"], item["scimBaseUrl"], row["created_at"], row["last_used_at"]]
            for item, row in zip(items, rows, strict=True)
        ],
    )
