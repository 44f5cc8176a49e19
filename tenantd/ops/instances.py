"""What each running `tenantd serve` reports about itself, and how the CLI compares with it.

Every server writes one row of `instances` at start (host, pid, version, its switches, its
registered event types), refreshes it every TENANTD_INSTANCE_HEARTBEAT_SECONDS and deletes
it on a clean shutdown. `tenantd status` reads the rows: a row whose heartbeat is older than
three of its own intervals (measured by the database's clock) is stale, its process died
without saying so. `tenantd notify send` takes its work-deciding switch from the live rows.

A row holds no secret: switches are booleans and names (the email provider's name, never its
key; PUBLIC_BASE_URL; which OAuth providers, never their client secrets). `switches` is the
one list of them, so the server and the CLI describe a configuration the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from tenantd import __version__
from tenantd.db import Database
from tenantd.ops import queries
from tenantd.ops.queries import PRUNE_AFTER as PRUNE_AFTER
from tenantd.ops.queries import STALE_AFTER_BEATS as STALE_AFTER_BEATS
from tenantd.settings import Settings

log = logging.getLogger(__name__)


# The switches that decide what a send does when the CLI dispatches it in its own process
# (QUEUES_ENABLED off): the CLI refuses to send when it differs from the instances on one.
SEND_SWITCHES = (
    "EMAIL_PROVIDER",
    "WEB_PUSH",
    "NOTIFICATIONS_SSE_ENABLED",
    "PUBLIC_BASE_URL",
    "TENANTD_EVENT_MODULES",
    "TENANTD_BUILTIN_NOTIFICATIONS",
    "TENANTD_EVENT_CATALOG",
)


def switches(settings: Settings, declared_event_types: int | None = None) -> dict[str, Any]:
    """The switches of a configuration, by the variable that sets each (the fields its
    sections mark as switches; WEB_PUSH: the three WEB_PUSH_VAPID_* variables are set;
    TENANTD_EVENT_CATALOG: the file's absolute path, "" when unset). Values only a name, a
    path or a flag: nothing secret. A server also gives DECLARED_EVENT_TYPES, how many of
    its event types are declarative (the catalog file's and those defined over HTTP); a
    CLI's own switches leave it out, so it is never one of the differences."""
    reported = settings.switches()
    if declared_event_types is not None:
        reported["DECLARED_EVENT_TYPES"] = declared_event_types
    return reported


def differences(
    mine: Mapping[str, Any], theirs: Mapping[str, Any], names: Iterable[str] | None = None
) -> list[dict[str, Any]]:
    """Where two sets of switches disagree: [{name, cli, instance}] in `mine`'s order (only
    `names` when given). A switch one side does not know (another version) is not compared."""
    wanted = set(mine) if names is None else set(names)
    return [
        {"name": name, "cli": value, "instance": theirs[name]}
        for name, value in mine.items()
        if name in wanted and name in theirs and theirs[name] != value
    ]


class Instance:
    """This process's row: registered by `heartbeating`, described by `describe()` at each
    beat (event types may change while it runs)."""

    def __init__(
        self, listen: str | None, describe: Callable[[], tuple[dict[str, Any], list[str]]]
    ):
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.id = f"{self.host}:{self.pid}:{uuid.uuid4().hex[:8]}"
        self.listen = listen
        self.describe = describe

    def params(self, interval: float) -> dict[str, Any]:
        reported, event_types = self.describe()
        return {
            "instance": self.id,
            "host": self.host,
            "pid": self.pid,
            "listen": self.listen,
            "version": __version__,
            "interval": interval,
            "switches": reported,
            "event_types": sorted(event_types),
        }


async def _beat(db: Database, instance: Instance, interval: float) -> None:
    async with db.connection() as conn:
        await conn.execute(queries.REGISTER_INSTANCE, instance.params(interval))


@contextlib.asynccontextmanager
async def heartbeating(db: Database, instance: Instance, interval: float) -> AsyncIterator[None]:
    """Register `instance`, refresh its row every `interval` seconds, delete it on exit.

    A failed beat (database away) is logged and tried again at the next one; the row then
    looks stale to `tenantd status` until a beat succeeds, which is the truth."""
    try:  # never a reason not to serve (e.g. `serve --no-migrate` before this migration)
        async with asyncio.timeout(5.0), db.connection() as conn:
            await conn.execute(queries.PRUNE_INSTANCES)
        await _beat(db, instance, interval)
        log.info("instance registered", extra={"instance": instance.id})
    except Exception as error:
        log.warning("could not register instance (tried again every beat): %r", error)

    async def loop() -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                async with asyncio.timeout(max(interval, 1.0)):
                    await _beat(db, instance, interval)
            except Exception as error:
                log.warning("instance heartbeat failed: %r", error)

    task = asyncio.get_running_loop().create_task(loop())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        try:
            async with asyncio.timeout(5.0), db.connection() as conn:
                await conn.execute(queries.UNREGISTER_INSTANCE, {"instance": instance.id})
        except Exception as error:  # it goes stale instead
            log.warning("could not unregister instance: %r", error)


async def read_instances(db: Database) -> list[dict[str, Any]] | None:
    """Every row of `instances` (None before the migration that creates it), stale ones
    marked, in the shape of `tenantd status --json`."""
    async with db.connection() as conn:
        if not await conn.fetch_val(queries.HAS_INSTANCES_TABLE):
            return None
        rows = await conn.fetch_all(queries.LIST_INSTANCES)
    return [
        {
            "instance": row["instance"],
            "host": row["host"],
            "pid": row["pid"],
            "listen": row["listen"],
            "version": row["version"],
            "startedAt": row["started_at"],
            "heartbeatAt": row["heartbeat_at"],
            "heartbeatAgeSeconds": round(max(row["heartbeat_age"], 0.0), 1),
            "heartbeatSeconds": row["heartbeat_seconds"],
            "stale": row["stale"],
            "switches": dict(row["switches"] or {}),
            "eventTypes": list(row["event_types"] or []),
        }
        for row in rows
    ]


def live(instances: Iterable[dict[str, Any]] | None) -> list[dict[str, Any]]:
    return [instance for instance in instances or () if not instance["stale"]]


# --- the CLI's sends follow the service ------------------------------------------------


class InstanceConflict(ValueError):
    """The CLI cannot act as the running service would: the message says why."""


def _named(instance: Mapping[str, Any]) -> str:
    return f"{instance['host']}:{instance['pid']}"


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return "(unset)" if value in (None, "") else str(value)


def follow_instances(
    config: Settings, instances: Iterable[dict[str, Any]] | None, event_type: str
) -> Settings:
    """The settings `tenantd notify send` opens its services with, so that it cannot do
    something the running service would not.

    No live instance: the CLI's own configuration (nothing runs to contradict it). Otherwise
    every live instance must know `event_type` and they must agree on QUEUES_ENABLED, which
    the CLI then takes from them: on, the CLI only writes the dispatch job and the instances'
    runners deliver it with their configuration; off, the instances run nothing the CLI
    enqueues, so the CLI dispatches in its own process, and refuses when its configuration
    differs from theirs on a switch that changes what a send does (SEND_SWITCHES)."""
    running = live(instances)
    if not running:
        return config
    queues = {bool(instance["switches"].get("QUEUES_ENABLED")) for instance in running}
    if len(queues) > 1:
        detail = ", ".join(
            f"{_named(i)} {_shown(bool(i['switches'].get('QUEUES_ENABLED')))}" for i in running
        )
        raise InstanceConflict(
            f"the running instances disagree on QUEUES_ENABLED ({detail}): give them one"
            " configuration first (tenantd status shows each)"
        )
    missing = [_named(i) for i in running if event_type not in i["eventTypes"]]
    if missing:
        raise InstanceConflict(
            f"event type {event_type!r} is not registered on the running instance(s)"
            f" {', '.join(missing)} (tenantd status lists their event types)"
        )
    [queues_enabled] = queues
    if queues_enabled:
        return config.switched("QUEUES_ENABLED", True)
    mine = switches(config)
    for instance in running:
        found = differences(mine, instance["switches"], SEND_SWITCHES)
        if found:
            detail = "; ".join(
                f"{d['name']}: this CLI {_shown(d['cli'])}, the instance {_shown(d['instance'])}"
                for d in found
            )
            raise InstanceConflict(
                f"with QUEUES_ENABLED off this CLI would deliver the notification itself, but"
                f" its configuration differs from the running instance {_named(instance)}"
                f" ({detail}): run it with the service's env file (--env-file)"
            )
    return config.switched("QUEUES_ENABLED", False)
