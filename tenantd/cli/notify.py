"""`tenantd notify send EVENT_TYPE --user ID --payload JSON`: the same send() as the code path."""

from __future__ import annotations

import json
import uuid
from typing import Any

import typer

from tenantd.app.bundle import Domains
from tenantd.cli.common import fail, print_json, with_services
from tenantd.db import Database
from tenantd.errors import AppError, ValidationFailed
from tenantd.notifications import send
from tenantd.notifications.registry import RegistryError
from tenantd.ops.instances import InstanceConflict, follow_instances, read_instances
from tenantd.settings import Settings

app = typer.Typer(help="Notifications.", no_args_is_help=True)


@app.command("send")
def send_command(
    event_type: str = typer.Argument(..., help="A registered event type, e.g. comment.created."),
    user: str = typer.Option(..., "--user", help="Recipient user id."),
    payload: str = typer.Option("{}", "--payload", help="Payload as a JSON object."),
    account: str | None = typer.Option(None, "--account", help="Account id to attach."),
) -> None:
    """Send one notification (validated against the event's schema).

    It follows the running service: with instances running (tenantd status lists them) it
    takes QUEUES_ENABLED from them. On, it writes the dispatch job and their runners deliver
    it; off, it delivers itself and refuses when its configuration differs from theirs on a
    switch that changes a send. Refused too when they don't register EVENT_TYPE.

    Example: tenantd notify send comment.created --user 6f1c... --payload '{"text": "hi"}'
    """
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as error:
        fail(f"--payload is not valid JSON: {error.msg}")
    if not isinstance(data, dict):
        fail("--payload must be a JSON object")
    try:
        recipient = uuid.UUID(user)
    except ValueError:
        fail(f"unknown user {user!r} (not a user id)")

    async def work(domains: Domains) -> dict[str, Any]:
        outcome = await send(
            domains.notifications,
            event_type,
            recipient_user_id=recipient,
            payload=data,
            account_id=account,
        )
        return {
            "notificationId": str(outcome.notification_id) if outcome.notification_id else None,
            "status": outcome.status,
        }

    async def follow(config: Settings, db: Database) -> Settings:
        return follow_instances(config, await read_instances(db), event_type)

    try:
        result = with_services(work, adjust=follow)
    except InstanceConflict as error:
        fail(str(error))
    except ValidationFailed as error:
        details = "; ".join(f"{field}: {message}" for field, message in error.fields.items())
        fail(f"{error.message}: {details}")
    except AppError as error:
        fail(error.message)
    except RegistryError as error:
        fail(str(error))
    print_json(result)
