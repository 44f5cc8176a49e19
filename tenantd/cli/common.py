"""What every CLI command shares: settings, a database, services, output and exit codes.

Exit status: 0 success, 1 refused operation, 2 bad usage (Typer's own usage errors).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import re
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tenantd.app.bundle import Domains, open_services
from tenantd.app.settings import load_settings
from tenantd.cli.state import state
from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.migrate import migrate
from tenantd.db.provide import provided_database
from tenantd.logging_setup import setup_logging
from tenantd.settings import Settings, SettingsError
from tenantd.web.json import dumps

T = TypeVar("T")

console = Console()


def group(name: str, summary: str, example: str | None = None) -> typer.Typer:
    """A command group: run without a command, it prints its help, which ends with `example`."""
    text = summary if example is None else f"{summary}\n\nExample: {example}"
    return typer.Typer(name=name, help=text, no_args_is_help=True)


def fail(message: str, code: int = 1) -> NoReturn:
    """One plain line on stderr, then exit (1 = refused, 2 = bad usage)."""
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(code)


# The service's configuration (systemd/tenantd.service: EnvironmentFile=): every command,
# `serve` included, reads it when it exists and no --env-file is given, so the CLI runs with
# what the service runs with. TENANTD_ENV_FILE names another default ("" for none).
DEFAULT_ENV_FILE = "/etc/tenantd/tenantd.env"


def default_env_file() -> str | None:
    """TENANTD_ENV_FILE when set (empty: no file), else DEFAULT_ENV_FILE if it exists."""
    named = os.environ.get("TENANTD_ENV_FILE")
    if named is not None:
        return named.strip() or None
    return DEFAULT_ENV_FILE if os.path.exists(DEFAULT_ENV_FILE) else None


def settings(env_file: str | None = None) -> Settings:
    """The configuration of this command: --env-file (or the default file, the service's),
    under the process environment, which wins over the file."""
    path = env_file or state.env_file or default_env_file()
    try:
        loaded = load_settings(path)
    except PermissionError:
        fail(
            f"cannot read {path} (the service's configuration): run as its user or root,"
            " or name another file with --env-file",
            2,
        )
    except (SettingsError, OSError) as error:
        fail(str(error), 2)
    state.loaded_env_file = str(Path(path).absolute()) if path else None
    # At the default level, commands show warnings and the operational events only.
    setup_logging(loaded.log.level, loaded.log.format, quiet=loaded.log.level == "info")
    return loaded


def with_services(
    work: Callable[[Domains], Awaitable[T]],
    *,
    env_file: str | None = None,
    adjust: Callable[[Settings, Database], Awaitable[Settings]] | None = None,
) -> T:
    """Provide a database (migrated), open the services, run `work` once. `adjust` may
    replace the settings the services open with, once the database is there (e.g. by what
    the running instances report)."""
    config = settings(env_file)

    async def main(url: str) -> T:
        opened = config
        db = await create_database(url_to_dsn(url), minsize=1, maxsize=2)
        try:
            await migrate(db, config.database.sql_dir)
            if adjust is not None:
                opened = await adjust(config, db)
        finally:
            await db.close()
        async with open_services(opened, url) as domains:
            return await work(domains)

    try:
        with provided_database(config) as url:
            return asyncio.run(main(url))
    except SettingsError as error:  # e.g. a provider selected without its key
        fail(str(error), 2)


def print_json(value: Any) -> None:
    """JSON as the API writes it (its serializer: camelCase models, ISO 8601 dates in UTC with
    `Z`, ids as strings), indented."""
    sys.stdout.write(dumps(value, indent=True).decode())
    sys.stdout.write("\n")


# Columns holding identifiers (ids, kids, addresses): never cut, kept on one line when the
# terminal has room (folded, never shortened with an ellipsis, when it has not).
_IDENTIFIER = re.compile(r"(^|[_ ])(id|kid|key|email|address|domain|url)$")
PIPE_WIDTH = 10_000  # no terminal: a row is never wrapped to a guessed width


def table_console() -> Console:
    """The terminal's console; piped or redirected output gets no width limit (rich would
    otherwise assume 80 columns, or COLUMNS, and shorten cells)."""
    return console if console.is_terminal else Console(width=PIPE_WIDTH, highlight=False)


def cell(value: Any) -> str:
    """A table cell: a time in UTC to the second (as the JSON's, without the fraction)."""
    if value is None:
        return ""
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    return str(value)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[cell(value) for value in row] for row in rows]
    table = Table(title=title)
    for index, column in enumerate(columns):
        identifier = _IDENTIFIER.search(column.lower()) is not None
        widest = max((len(row[index]) for row in cells), default=0)
        table.add_column(
            column,
            overflow="fold",  # every column: wrap or fold, never an ellipsis
            no_wrap=identifier,
            min_width=max(widest, len(column)) if identifier else None,
        )
    for row in cells:
        table.add_row(*(Text(value) for value in row))  # text, never rich markup
    table_console().print(table)
