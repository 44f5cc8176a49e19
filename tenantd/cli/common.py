"""What every CLI command shares: settings, a database, services, output and exit codes.

Exit status: 0 success, 1 refused operation, 2 bad usage (Typer's own usage errors).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table

from tenantd.app.services import open_services
from tenantd.cli.state import state
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.migrate import migrate
from tenantd.db.provide import provided_database
from tenantd.logging_setup import setup_logging
from tenantd.services import Services
from tenantd.settings import Settings, SettingsError, load_settings

T = TypeVar("T")

console = Console()


def fail(message: str, code: int = 1) -> NoReturn:
    """One plain line on stderr, then exit (1 = refused, 2 = bad usage)."""
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


def settings(env_file: str | None = None) -> Settings:
    try:
        loaded = load_settings(env_file or state.env_file)
    except (SettingsError, OSError) as error:
        fail(str(error), 2)
    # At the default level, commands show warnings and the operational events only.
    setup_logging(loaded.log_level, loaded.log_format, quiet=loaded.log_level == "info")
    return loaded


def with_services(work: Callable[[Services], Awaitable[T]], *, env_file: str | None = None) -> T:
    """Provide a database (migrated), open the services, run `work` once."""
    config = settings(env_file)

    async def main(url: str) -> T:
        db = await create_database(url_to_dsn(url), minsize=1, maxsize=2)
        try:
            await migrate(db)
        finally:
            await db.close()
        async with open_services(config, url) as services:
            return await work(services)

    try:
        with provided_database(config) as url:
            return asyncio.run(main(url))
    except SettingsError as error:  # e.g. a provider selected without its key
        fail(str(error), 2)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, default=str, indent=2) + "\n")


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*("" if value is None else str(value) for value in row))
    console.print(table)
