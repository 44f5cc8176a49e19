"""`tenantd api-keys`: create, list and revoke the keys server callers send as
`Authorization: Bearer tdk_...`."""

from __future__ import annotations

import getpass
import sys
import uuid
from typing import Any

import typer

from tenantd.apikeys import service
from tenantd.bundle import Services
from tenantd.cli.common import console, fail, group, print_json, print_table, with_services
from tenantd.db import Row
from tenantd.errors import NotFound, ValidationFailed

app = group(
    "api-keys",
    "Server API keys (scopes: " + ", ".join(service.SCOPES) + ").",
    "tenantd api-keys create --name backend --scopes events:read,notifications:send",
)

COLUMNS = ("id", "name", "scopes", "created_at", "last_used_at", "revoked_at")


def operator_name() -> str:
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):
        return "cli"


def _json_row(row: Row) -> dict[str, Any]:
    return {
        "id": str(row["id"]),
        "name": row["name"],
        "scopes": list(row["scopes"]),
        "createdBy": row["created_by"],
        "createdAt": row["created_at"],
        "lastUsedAt": row["last_used_at"],
        "revokedAt": row["revoked_at"],
    }


@app.command()
def create(
    name: str = typer.Option(..., "--name", help="What the key is for (e.g. backend)."),
    scopes: str = typer.Option(
        ..., "--scopes", help="Comma-separated: " + ",".join(service.SCOPES) + "."
    ),
) -> None:
    """Create a key and print its token `tdk_<id>_<secret>` on stdout: it is shown only once.

    Example: KEY=$(tenantd api-keys create --name backend --scopes notifications:send)
    """
    try:
        service.parse_scopes(scopes)
    except ValidationFailed as error:
        fail("; ".join(error.fields.values()), 2)

    async def work(services: Services) -> service.CreatedKey:
        async with services.db.transaction() as conn:
            return await service.create_key(
                conn,
                secret_key=services.settings.secret_key,
                name=name,
                scopes=scopes,
                created_by=operator_name(),
            )

    try:
        created = with_services(work)
    except ValidationFailed as error:
        fail("; ".join(f"{k}: {v}" for k, v in error.fields.items()), 2)
    sys.stdout.write(created.token + "\n")
    sys.stderr.write(
        f"created API key {created.id} ({created.name}; scopes {','.join(created.scopes)});"
        " the token above is shown only this once\n"
    )


@app.command("list")
def list_(
    active: bool = typer.Option(False, "--active", help="Leave out revoked keys."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array instead of a table."),
) -> None:
    """List keys: id, name, scopes, created, last used (to the minute), revoked. No secrets.

    Example: tenantd api-keys list --json
    """

    async def work(services: Services) -> list[Row]:
        async with services.db.connection() as conn:
            return await service.list_keys(conn, include_revoked=not active)

    rows = with_services(work)
    if as_json:
        print_json([_json_row(row) for row in rows])
        return
    print_table(
        "API keys",
        COLUMNS,
        [
            [row["id"], row["name"], ",".join(row["scopes"])]
            + [row[c] for c in ("created_at", "last_used_at", "revoked_at")]
            for row in rows
        ],
    )


@app.command()
def revoke(key_id: str = typer.Argument(..., help="The key's id (from `list`).")) -> None:
    """Revoke a key: every instance refuses it within milliseconds. Exit 1 if there is no
    such key or it was already revoked.

    Example: tenantd api-keys revoke 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80
    """
    try:
        parsed = uuid.UUID(key_id)
    except ValueError:
        fail(f"not a valid key id: {key_id!r}", 2)

    async def work(services: Services) -> bool:
        async with services.db.connection() as conn:
            return await service.revoke_key(conn, parsed, revoked_by=operator_name())

    try:
        changed = with_services(work)
    except NotFound as error:
        fail(error.message)
    if not changed:
        fail(f"API key {parsed} was already revoked")
    console.print(f"revoked API key {parsed}")
