"""`tenantd keys`: the access-token signing keys (list, rotate, retire)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import typer
from pydantic.alias_generators import to_camel

from tenantd.bundle import Services
from tenantd.cli.common import console, fail, print_json, print_table, with_services
from tenantd.errors import AppError
from tenantd.identity.keys import service
from tenantd.identity.keys.service import KeyView

app = typer.Typer(
    name="keys",
    help="Access-token signing keys: every kid with its state; rotate; retire.",
    no_args_is_help=True,
)

COLUMNS = ("kid", "alg", "state", "published_at", "signing_from", "retired_at", "not_after")


def _json(view: KeyView) -> dict[str, Any]:
    """The view's fields under the API's camelCase names."""
    return {to_camel(name): value for name, value in asdict(view).items()}


@app.command("list")
def list_keys(json_output: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Every kid with its state: next, current, retired (published until not_after), expired.

    Example: tenantd keys list --json
    """

    async def work(services: Services) -> list[KeyView]:
        async with services.db.connection() as conn:
            return await service.list_keys(conn)

    views = with_services(work)
    if json_output:
        print_json([_json(view) for view in views])
        return
    rows = [[getattr(view, column) for column in COLUMNS] for view in views]
    print_table("signing keys", COLUMNS, rows)


@app.command()
def rotate() -> None:
    """Publish a next key now; it starts signing after one JWKS cache lifetime (plus a
    minute), and the current key retires then. Exit 1 when a rotation is pending.

    Example: tenantd keys rotate
    """

    async def work(services: Services) -> KeyView:
        async with services.db.transaction() as conn:
            row = await service.rotate(conn, services.settings)
            return service.view_of({**row})

    try:
        view = with_services(work)
    except AppError as error:
        fail(error.message)
    console.print(
        f"published {view.kid} ({view.alg}); it signs from {view.signing_from.isoformat()}"
    )


@app.command()
def retire(
    kid: str = typer.Argument(..., help="The key id (see `tenantd keys list`)."),
    now: bool = typer.Option(
        False, "--now", help="Compromised key: refuse its tokens at once (their sessions refresh)."
    ),
) -> None:
    """Stop publishing KID once no live token needs it (a next key: at once). The current key
    retires through `rotate`; with --now it ends at once and the pending next key signs.

    Example: tenantd keys retire 20261124-3f9a1c0b2d4e
    """

    async def work(services: Services) -> KeyView:
        async with services.db.transaction() as conn:
            return await service.retire(conn, services.settings, kid, now=now)

    try:
        view = with_services(work)
    except AppError as error:
        fail(error.message)
    until = view.not_after.isoformat() if view.not_after else "-"
    console.print(f"{view.kid}: {view.state}; published until {until}")
