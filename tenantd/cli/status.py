"""`tenantd status`: is this deployment ready, what is it configured to do, and what does each
running instance report about itself (and where does this CLI's configuration differ)."""

from __future__ import annotations

import asyncio
import datetime as dt
import sys
from typing import Any

import typer

from tenantd.cli.common import console, fail, print_json, print_table, settings
from tenantd.cli.state import state as cli_state
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
    """Show version, database, migrations, queue depth, channels, sweeps and instances.

    Sweeps: the last run of each one, by any instance. Instances: what each running
    `tenantd serve` reports (version, switches, event types, heartbeat; stale when its
    heartbeat is older than three intervals) and where this CLI's configuration differs.

    Migrations are not applied by this command. Exit status 0 when the
    database answers and no migration is pending, 1 otherwise.

    Examples:
      tenantd status
      tenantd status --json | jq .queue
    """
    config = settings(env_file)
    env_path = cli_state.loaded_env_file

    async def run(url: str) -> dict[str, Any]:
        try:
            db = await create_database(url_to_dsn(url), minsize=1, maxsize=1)
        except Exception as error:
            report = await gather_status(None, config, env_path)
            report["error"] = f"{type(error).__name__}: {error}".strip()[:300]
            return report
        try:
            report = await gather_status(db, config, env_path)
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
        sys.stdout.write(
            f"configuration of this CLI: {env_path} under the process environment\n"
            if env_path
            else "configuration of this CLI: the process environment (no env file)\n"
        )
        if report["instances"] is not None:
            sys.stdout.write(_instances_text(report["instances"]))
        if report.get("error"):
            console.print(f"[red]{report['error']}[/red]")
    if not report["ok"]:
        fail(
            "not ready: "
            + ("database unavailable" if report["database"] != "ok" else "migrations pending"),
            1,
        )


def _shown(value: Any) -> str:
    if value is None or value == "":
        return "(unset)"
    return _onoff(value)


def _instances_text(instances: list[dict[str, Any]]) -> str:
    """Plain lines (never wrapped or cut): each instance as it reports itself."""
    if not instances:
        return "instances: none running (no tenantd serve has registered)\n"
    lines = ["instances (as each running tenantd serve reports itself):"]
    for instance in instances:
        age = instance["heartbeatAgeSeconds"]
        state_text = (
            f"STALE: last heartbeat {age:.1f} s ago (expected every"
            f" {instance['heartbeatSeconds']:g} s; the process is gone or cut off)"
            if instance["stale"]
            else f"live, heartbeat {age:.1f} s ago (every {instance['heartbeatSeconds']:g} s)"
        )
        listen = f" on {instance['listen']}" if instance["listen"] else ""
        started = instance["startedAt"].astimezone(dt.UTC)
        lines.append(f"  {instance['host']} pid {instance['pid']}{listen}: {state_text}")
        lines.append(f"    version {instance['version']}, started {started:%Y-%m-%d %H:%M:%S} UTC")
        lines.append(
            "    switches: "
            + " ".join(f"{name}={_shown(value)}" for name, value in instance["switches"].items())
        )
        lines.append("    event types: " + (", ".join(instance["eventTypes"]) or "(none)"))
        found = instance["differences"]
        lines.append(
            "    differs from this CLI: "
            + (
                "; ".join(
                    f"{d['name']} (instance {_shown(d['instance'])}, CLI {_shown(d['cli'])})"
                    for d in found
                )
                if found
                else "nothing"
            )
        )
    return "\n".join(lines) + "\n"
