"""`tenantd webhooks`: outbound webhook endpoints (Standard Webhooks signed deliveries)."""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import typer

from tenantd.cli.accounts import parse_id, run_domains
from tenantd.cli.common import console, fail, group, print_json, print_table
from tenantd.outbox import Actor
from tenantd.webhooks import endpoints
from tenantd.webhooks.domain import Webhooks
from tenantd.webhooks.views import delivery_json, endpoint_json

T = TypeVar("T")

app = group(
    "webhooks",
    "Endpoints that receive signed events (user.created, membership.revoked, ...).",
    "tenantd webhooks add https://app.example.com/hooks/tenantd --events user.created",
)


def _iso(value: Any) -> str:
    return "" if value is None else value.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _events(value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [item.strip() for item in value.split(",") if item.strip()]


def run(work: Callable[[Webhooks], Awaitable[T]]) -> T:
    """A call on the webhooks domain (a refused one: exit 1)."""
    return run_domains(lambda domains: work(domains.webhooks))


def _on_endpoint(
    endpoint_id: str, call: Callable[[Webhooks, uuid.UUID], Awaitable[T]]
) -> tuple[uuid.UUID, T]:
    """`call` for the endpoint the argument names (a malformed id: exit 2; refused: exit 1)."""
    key = parse_id(endpoint_id, "endpoint id")
    return key, run(lambda s: call(s, key))


@app.command()
def add(
    url: str = typer.Argument(..., help="http(s) URL that receives POSTed events."),
    events: str | None = typer.Option(
        None, "--events", help="Comma list of event types (account.* for a noun); all if unset."
    ),
    description: str = typer.Option("", "--description", help="A note for operators."),
) -> None:
    """Add an endpoint; prints its id and its whsec_ signing secret (shown only here).

    Example: tenantd webhooks add https://app.example.com/hooks --events user.created,account.*
    """
    created = run(
        lambda s: endpoints.add_endpoint(
            s,
            url=url,
            events=_events(events),
            description=description,
        )
    )
    typer.echo(f"id     {created.endpoint['id']}")
    typer.echo(f"secret {created.secret}")


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List endpoints with their event filter and state.

    Example: tenantd webhooks list --json
    """
    rows = run(endpoints.list_endpoints)
    if as_json:
        print_json([endpoint_json(row) for row in rows])
        return
    print_table(
        "Webhook endpoints",
        ("id", "url", "events", "state", "description"),
        [
            (
                row["id"],
                row["url"],
                ",".join(row["event_types"]) or "*",
                "enabled" if row["disabled_at"] is None else f"disabled {_iso(row['disabled_at'])}",
                row["description"],
            )
            for row in rows
        ],
    )


@app.command()
def remove(endpoint_id: str = typer.Argument(..., metavar="ENDPOINT_ID")) -> None:
    """Delete an endpoint and its deliveries. Exit 1 when there is none.

    Example: tenantd webhooks remove 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80
    """
    key, _ = _on_endpoint(endpoint_id, endpoints.remove_endpoint)
    console.print(f"removed {key}")


@app.command("rotate-secret")
def rotate_secret(
    endpoint_id: str = typer.Argument(..., metavar="ENDPOINT_ID"),
    now: bool = typer.Option(
        False, "--now", help="End the old secret at once (it leaked): no 24-hour overlap."
    ),
) -> None:
    """Print a new secret; the old one keeps signing alongside it for 24 hours (--now: not at all).

    Example: tenantd webhooks rotate-secret 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80 --now
    """
    _, created = _on_endpoint(endpoint_id, lambda s, key: endpoints.rotate_secret(s, key, now=now))
    typer.echo(f"secret {created.secret}")
    if now:
        console.print("the previous secret no longer signs")
        return
    console.print(
        "the previous secret also signs until "
        + _iso(created.endpoint["previous_secret_expires_at"])
        + " UTC"
    )


@app.command()
def enable(endpoint_id: str = typer.Argument(..., metavar="ENDPOINT_ID")) -> None:
    """Turn a disabled endpoint back on (then `replay` what it missed).

    Example: tenantd webhooks enable 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80
    """
    key, _ = _on_endpoint(endpoint_id, endpoints.enable_endpoint)
    console.print(f"enabled {key}")


@app.command()
def test(endpoint_id: str = typer.Argument(..., metavar="ENDPOINT_ID")) -> None:
    """Queue a webhook.test event to this endpoint; prints the event id (its webhook-id).

    Example: tenantd webhooks test 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80
    """
    _, event_id = _on_endpoint(
        endpoint_id, lambda s, key: endpoints.send_test(s, key, actor=Actor.operator())
    )
    console.print(f"queued {event_id}")


@app.command()
def deliveries(
    endpoint_id: str = typer.Argument(..., metavar="ENDPOINT_ID"),
    failed: bool = typer.Option(False, "--failed", help="Only deliveries that failed for good."),
    limit: int = typer.Option(100, min=1, help="At most this many, newest first."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Recent deliveries of an endpoint: event, status, attempts, last answer.

    Example: tenantd webhooks deliveries 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80 --failed
    """
    _, rows = _on_endpoint(
        endpoint_id, lambda s, key: endpoints.list_deliveries(s, key, failed=failed, limit=limit)
    )
    if as_json:
        print_json([delivery_json(row) for row in rows])
        return
    print_table(
        "Deliveries",
        ("event", "type", "status", "attempts", "last answer", "next attempt"),
        [
            (
                row["event_id"],
                row["type"],
                row["status"],
                row["attempts"],
                row["last_error"] or row["last_status_code"] or "",
                _iso(row["next_attempt_at"]) if row["status"] == "pending" else "",
            )
            for row in rows
        ],
    )


@app.command()
def replay(
    endpoint_id: str = typer.Argument(..., metavar="ENDPOINT_ID"),
    since: str = typer.Option(..., "--since", help="ISO 8601 time, e.g. 2026-11-20T00:00:00Z."),
) -> None:
    """Deliver again every retained event since TIME that the endpoint subscribes to.

    Example: tenantd webhooks replay 3f2b9c1e-8d4a-4b7e-9f00-2a1c5d6e7f80 --since 2026-11-20
    """
    key = parse_id(endpoint_id, "endpoint id")
    try:
        when = dt.datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        fail(f"not an ISO 8601 time: {since!r}", 2)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    count = run(lambda s: endpoints.replay(s, key, since=when))
    console.print(f"queued {count} deliveries")
