"""`tenantd status`: is this deployment ready, and what is it configured to do."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import typer

from tenantd.cli.common import console, fail, print_json, print_table, settings
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.provide import provided_database
from tenantd.ops.status import gather_status
from tenantd.webhooks.endpoints import status_report


def _onoff(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def status(
    as_json: bool = typer.Option(False, "--json", help="Print the status as JSON."),
    env_file: str | None = typer.Option(None, "--env-file", help="KEY=value file to load."),
) -> None:
    """Show version, database, migrations, queue depth, channels and sweeps.

    Sweeps: the last run of each one, by any instance.

    Migrations are not applied by this command. Exit status 0 when the
    database answers and no migration is pending, 1 otherwise.

    Examples:
      tenantd status
      tenantd status --json | jq .queue
    """
    config = settings(env_file)

    async def run(url: str) -> dict[str, Any]:
        try:
            db = await create_database(url_to_dsn(url), minsize=1, maxsize=1)
        except Exception as error:
            report = await gather_status(None, config)
            report["error"] = f"{type(error).__name__}: {error}".strip()[:300]
            return report
        try:
            report = await gather_status(db, config)
            if report["database"] == "ok" and not report["migrations"]["pending"]:
                try:
                    report["webhooks"] = await status_report(db)
                except Exception as error:
                    report["webhooks"] = {"error": f"{type(error).__name__}: {error}"[:300]}
            return report
        finally:
            await db.close()

    with provided_database(config) as url:
        report = asyncio.run(run(url))
    if as_json:
        print_json(report)
    else:
        migrations = report["migrations"]
        pending = migrations["pending"]
        rows: list[tuple[str, str]] = [
            ("version", report["version"]),
            ("database", report["database"]),
            (
                "migrations",
                "unknown"
                if pending is None
                else f"{migrations['applied']} applied, "
                + (f"{len(pending)} pending: {', '.join(pending)}" if pending else "none pending"),
            ),
        ]
        queue = report["queue"]
        if queue is not None:
            rows.append(
                (
                    "job queue",
                    f"{queue['queued']} queued ({queue['due']} due), {queue['running']} running, "
                    f"{queue['failed']} failed",
                )
            )
        rows.append(("queues", _onoff(report["queuesEnabled"])))
        for channel, value in report["channels"].items():
            rows.append((f"channel {channel}", _onoff(value)))
        for run_row in report["sweeps"]:
            rows.append(
                (
                    f"sweep {run_row['name']}",
                    f"{run_row['last_status']} at "
                    f"{run_row['last_started_at'].astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
                    f" ({run_row['run_count']} runs)",
                )
            )
        hooks = report.get("webhooks") or {}
        if "outboxBacklog" in hooks:
            rows.append(("outbox", f"{hooks['outboxBacklog']} event(s) not yet relayed"))
            for endpoint in hooks["endpoints"]:
                state = "enabled" if endpoint["enabled"] else "DISABLED (failing 5 days)"
                failing = endpoint["failingSince"]
                if endpoint["enabled"] and failing is not None:
                    state += f", failing since {failing.astimezone(dt.UTC):%Y-%m-%d %H:%M} UTC"
                rows.append(
                    (
                        f"webhook {endpoint['url']}",
                        f"{state}; backlog {endpoint['backlog']} ({endpoint['retrying']} retrying),"
                        f" {endpoint['failed']} failed",
                    )
                )
        print_table("tenantd status", ("", ""), rows)
        if report.get("error"):
            console.print(f"[red]{report['error']}[/red]")
    if not report["ok"]:
        fail(
            "not ready: "
            + ("database unavailable" if report["database"] != "ok" else "migrations pending"),
            1,
        )
