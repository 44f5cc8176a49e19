"""`tenantd suppress`: the operator's view of the local email blocklist."""

from __future__ import annotations

from typing import Any

import typer

from tenantd.addresses import InvalidEmail, canonical_email
from tenantd.bundle import Services
from tenantd.cli.common import console, fail, group, print_json, print_table, with_services
from tenantd.db import Row
from tenantd.outbox import Actor
from tenantd.suppression import service as suppression

app = group("suppress", "The email suppression list: every send consults it first.")

COLUMNS = ("email", "reason", "provider", "created_at")


def _address(value: str) -> str:
    try:
        return canonical_email(value)
    except InvalidEmail as exc:
        fail(f"not an email address: {value!r} ({exc.reason})", 2)


def _choice(value: str | None, allowed: tuple[str, ...], name: str) -> str | None:
    if value is not None and value not in allowed:
        fail(f"{name} must be one of {', '.join(allowed)}", 2)
    return value


def _json_row(row: Row) -> dict[str, Any]:
    return {
        "email": row["email"],
        "reason": row["reason"],
        "provider": row["provider"],
        "createdAt": row["created_at"],
    }


def _show(rows: list[Row], *, as_json: bool, title: str) -> None:
    if as_json:
        print_json([_json_row(row) for row in rows])
    else:
        print_table(title, COLUMNS, [[row[c] for c in COLUMNS] for row in rows])


@app.command()
def add(
    email: str = typer.Argument(..., help="Address to suppress."),
    reason: str = typer.Option("manual", help="manual, inactive, hard_bounce, complaint, dropped."),
) -> None:
    """Suppress an address (provider manual). Exit 1 when it already has a row (kept as is).

    Example: tenantd suppress add bob@example.com --reason complaint
    """
    address = _address(email)
    _choice(reason, suppression.REASONS, "--reason")

    async def work(services: Services) -> Row | None:
        async with services.db.connection() as conn:
            if await suppression.add(
                conn, address, reason=reason, provider="manual", actor=Actor.operator()
            ):
                return None
            return await suppression.find(conn, address)

    existing = with_services(work)
    if existing is not None:
        fail(
            f"{address} is already suppressed"
            f" (reason {existing['reason']}, provider {existing['provider']})"
        )
    console.print(f"suppressed {address} (reason {reason}, provider manual)")


@app.command()
def remove(email: str = typer.Argument(..., help="Address to let mail through again.")) -> None:
    """Delete an address's row. Exit 1 when it has none.

    Example: tenantd suppress remove bob@example.com
    """
    address = _address(email)

    async def work(services: Services) -> bool:
        async with services.db.connection() as conn:
            return await suppression.remove(conn, address, actor=Actor.operator())

    if not with_services(work):
        fail(f"{address} is not suppressed")
    console.print(f"removed {address} from the suppression list")


@app.command("list")
def list_(
    provider: str | None = typer.Option(None, help="manual, postmark, resend or sendgrid."),
    reason: str | None = typer.Option(
        None, help="manual, inactive, hard_bounce, complaint or dropped."
    ),
    limit: int = typer.Option(1000, min=1, help="At most this many rows, newest first."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array instead of a table."),
) -> None:
    """List suppressed addresses (email, reason, provider, created_at), newest first.

    Example: tenantd suppress list --provider sendgrid --reason hard_bounce --json
    """
    _choice(provider, suppression.PROVIDERS, "--provider")
    _choice(reason, suppression.REASONS, "--reason")

    async def work(services: Services) -> list[Row]:
        async with services.db.connection() as conn:
            return await suppression.list_rows(conn, provider=provider, reason=reason, limit=limit)

    _show(with_services(work), as_json=as_json, title="Suppressed addresses")


@app.command()
def check(
    email: str = typer.Argument(..., help="Address to look up."),
    as_json: bool = typer.Option(False, "--json", help="Print the row as JSON."),
) -> None:
    """Exit 0 when the address is not suppressed; exit 1 and print the row when it is.

    Example: tenantd suppress check bob@example.com && echo deliverable
    """
    address = _address(email)

    async def work(services: Services) -> Row | None:
        async with services.db.connection() as conn:
            return await suppression.find(conn, address)

    row = with_services(work)
    if row is None:
        if as_json:
            print_json(None)
        else:
            console.print(f"{address} is not suppressed")
        return
    if as_json:
        print_json(_json_row(row))
    else:
        _show([row], as_json=False, title="Suppressed")
    raise typer.Exit(1)
