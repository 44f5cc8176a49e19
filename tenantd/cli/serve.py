"""`tenantd serve` and `tenantd migrate`."""

from __future__ import annotations

import asyncio
import logging
import resource
import signal

import typer
from aiohttp import web

from tenantd.app.factory import create_app
from tenantd.app.hooks import instance_hook
from tenantd.cli.common import console, fail, settings
from tenantd.db import DATABASE
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.migrate import migrate as apply_migrations
from tenantd.db.provide import provided_database
from tenantd.logging_setup import setup_logging
from tenantd.notifications.settings import NotificationSettings
from tenantd.ops.config import ProcessSettings
from tenantd.ops.heap import freeze_startup_heap
from tenantd.ops.shutdown import DrainingRunner

SHUTDOWN_TIMEOUT = 20.0  # systemd TimeoutStopSec is larger than this
KEEPALIVE_TIMEOUT = 75.0  # web.run_app's
SPARE_FILES = 1024  # descriptors beyond one per SSE stream: pool, clients, files

log = logging.getLogger(__name__)


def raise_open_files_limit(wanted: int) -> int:
    """Every SSE stream holds a socket: raise the soft RLIMIT_NOFILE towards the hard one
    when it is below `wanted` (systemd's LimitNOFILE sets both, so then nothing is called),
    and warn when even the hard limit is lower. Returns the soft limit in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < wanted and (hard == resource.RLIM_INFINITY or soft < hard):
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    if soft < wanted:
        log.warning(
            "open files limit %d is below %d (NOTIFICATIONS_SSE_MAX_STREAMS + %d):"
            " raise LimitNOFILE / ulimit -n",
            soft,
            wanted,
            SPARE_FILES,
        )
    return soft


def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8080, help="Port to listen on."),
    no_migrate: bool = typer.Option(False, "--no-migrate", help="Do not apply migrations first."),
    env_file: str | None = typer.Option(None, "--env-file", help="KEY=value file to load."),
    dev: bool = typer.Option(
        False,
        "--dev",
        help="A development run: without DATABASE_URL, start a private throwaway cluster"
        " (fsync off) under TENANTD_DATA_DIR. Also TENANTD_DEV=true (scripts/run sets it).",
    ),
) -> None:
    """Serve the HTTP API, job runner and scheduler.

    Without DATABASE_URL it refuses to start, unless told this is a development run (--dev or
    TENANTD_DEV=true): then it starts a private PostgreSQL cluster whose data is not durable.

    Example: tenantd serve --host 0.0.0.0 --port 8080
    """
    config = settings(env_file)
    if not config.database.url and not (dev or config.section(ProcessSettings).dev):
        fail(
            "DATABASE_URL is not set; tenantd serve needs a PostgreSQL database"
            " (for a development run on a private throwaway cluster: --dev or TENANTD_DEV=true)",
            2,
        )
    # The CLI quiets info lines; the server logs at the configured level (requests are info).
    setup_logging(config.log.level, config.log.format)
    raise_open_files_limit(
        config.section(NotificationSettings).notifications_sse_max_streams + SPARE_FILES
    )
    with provided_database(config) as url:

        async def migrate_first(app: web.Application) -> None:
            if not no_migrate:
                await apply_migrations(app[DATABASE], config.database.sql_dir)

        app = create_app(config, url, on_services=migrate_first)
        app.on_startup.append(freeze_startup_heap)  # after the services are up
        app.cleanup_ctx.append(instance_hook(f"{host}:{port}"))  # once everything runs
        asyncio.run(_serve(app, host, port, config.section(ProcessSettings).shutdown_drain_seconds))


async def _serve(app: web.Application, host: str, port: int, drain_seconds: float) -> None:
    """What web.run_app does for one TCP site, with a drain of open connections between
    SIGTERM (or SIGINT) and aiohttp's cleanup (tenantd/ops/shutdown.py)."""
    runner = DrainingRunner(
        app, access_log=None, keepalive_timeout=KEEPALIVE_TIMEOUT, shutdown_timeout=SHUTDOWN_TIMEOUT
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        console.print(f"======== Running on {site.name} ========\n(Press CTRL+C to quit)")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await runner.drain(drain_seconds)
    finally:
        await runner.cleanup()


def migrate(
    env_file: str | None = typer.Option(None, "--env-file", help="KEY=value file to load."),
) -> None:
    """Apply pending SQL migrations (safe to run from several hosts at once).

    Example: tenantd migrate
    """
    config = settings(env_file)

    async def run(url: str) -> list[str]:
        db = await create_database(url_to_dsn(url), minsize=1, maxsize=1)
        try:
            return await apply_migrations(db, config.database.sql_dir)
        finally:
            await db.close()

    with provided_database(config) as url:
        applied = asyncio.run(run(url))
    if applied:
        console.print(f"applied {len(applied)} migration(s): {', '.join(applied)}")
    else:
        console.print("database is up to date")
