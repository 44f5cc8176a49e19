"""Declarative event types stored over HTTP (table event_definitions, sql/0280), and the feed
that keeps every instance's registry equal to the table without a restart.

Why the bus and a timer, both (as the signing keys' feed): the table's trigger announces
tenantd_event_types on every change (the relay publishes it after commit), so a PUT reaches
every instance in milliseconds; a listener that reconnected may have missed one, so a gap
reloads too; and a listener can die silently, so the versions are read every RELOAD_SECONDS
regardless. That timer is the bound of "every instance uses a new definition within 5 s". A
reload reads the (type, version) list only and compiles just the definitions whose version
it has not compiled; the instance that took a PUT reloads before it answers (it reads its
own write).

Types of the deployment (Python modules, the catalog file) cannot be defined, replaced or
deleted over HTTP: 409 CONFLICT. A stored type a later deployment defines too is ignored.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psycopg2.errors
from pydantic import ValidationError

from tenantd.apikeys.principal import ActingKey
from tenantd.audit.keys import record_key_action
from tenantd.cache.reloader import Reloader
from tenantd.db import Database
from tenantd.errors import Conflict, NotFound, ValidationFailed
from tenantd.notifications import queries
from tenantd.notifications.declared import EventTypeBody, compile_declared
from tenantd.notifications.domain import Notifications
from tenantd.notifications.registry import RESERVED_PREFIX, EventRegistry, RegisteredEvent
from tenantd.pubsub import Bus

log = logging.getLogger(__name__)

CHANNEL = "tenantd_event_types"
RELOAD_SECONDS = 5.0


class DeployedEventType(Conflict):
    message = "This event type is defined by the deployment (a Python module or the catalog file)"


async def load_stored(db: Database, registry: EventRegistry) -> int:
    """Make the registry's stored types those of the table; how many were compiled."""
    async with registry.stored_load_lock:
        known = registry.stored_events()
        unusable = registry.unusable_stored
        async with db.connection() as conn:
            versions = await queries.event_definition_versions(conn)
            wanted = [
                r["type"]
                for r in versions
                if ((event := known.get(r["type"])) is None or event.version != r["version"])
                and (r["type"], r["version"]) not in unusable
            ]
            rows = await queries.event_definitions(conn, types=wanted) if wanted else []
        fresh = {row["type"]: _compiled(row) for row in rows}
        unusable.update((row["type"], row["version"]) for row in rows if fresh[row["type"]] is None)
        events: dict[str, RegisteredEvent] = {}
        for row in versions:
            name = row["type"]
            event = fresh.get(name) or known.get(name)
            if event is not None and not registry.deployed(name):
                events[name] = event
        if [(n, e.version) for n, e in events.items()] != [
            (n, e.version) for n, e in known.items()
        ]:
            registry.replace_stored(events)
        return len(fresh)


async def load_stored_once(db: Database, registry: EventRegistry) -> None:
    """One load at start-up (the CLI's too); a database not migrated yet has none."""
    try:
        await load_stored(db, registry)
    except psycopg2.errors.UndefinedTable:
        log.warning("table event_definitions missing (run tenantd migrate): no stored types")


def _compiled(row: Any) -> RegisteredEvent | None:
    try:
        body = EventTypeBody.model_validate(row["definition"])
        return compile_declared(row["type"], body, version=int(row["version"]))
    except (ValidationError, ValidationFailed):
        log.exception("stored event type %s cannot be compiled; it is not offered", row["type"])
        return None


class DefinitionFeed(Reloader):
    def __init__(self, db: Database, registry: EventRegistry, *, interval: float = RELOAD_SECONDS):
        super().__init__(interval)
        self.db = db
        self.registry = registry

    async def reload(self) -> None:
        await load_stored(self.db, self.registry)

    def reload_failed(self) -> None:
        log.exception("stored event types could not be reloaded; keeping the ones loaded")


@contextlib.asynccontextmanager
async def fed(db: Database, registry: EventRegistry, hub: Bus) -> AsyncIterator[None]:
    """Load the stored types now (after subscribing: nothing committed later is missed) and
    keep them current until the block ends."""
    feed = DefinitionFeed(db, registry)
    subscription = await hub.subscribe(CHANNEL, feed.request_reload, on_gap=feed.request_reload)
    try:
        await feed.reload()
    except Exception:
        feed.reload_failed()
    feed.start()
    try:
        yield
    finally:
        await feed.stop()
        await hub.unsubscribe(subscription)


# --- the service of the HTTP routes ---------------------------------------------------------


@dataclass(frozen=True)
class Defined:
    event: RegisteredEvent
    created: bool


def _refuse_deployed(registry: EventRegistry, event_type: str) -> None:
    if registry.deployed(event_type):
        raise DeployedEventType(details={"type": event_type})


async def define(
    services: Notifications, key: ActingKey, *, event_type: str, body: EventTypeBody
) -> Defined:
    """Create or replace a stored event type; it is checked (schema, templates, sandbox) and
    compiled first, so a definition that cannot be used is never stored."""
    registry = services.registry
    _refuse_deployed(registry, event_type)
    if event_type.startswith(RESERVED_PREFIX):
        raise ValidationFailed({"type": f"the {RESERVED_PREFIX} prefix is tenantd's own"})
    compile_declared(event_type, body)
    declared = body.model_dump(mode="json", by_alias=True, exclude_none=True)
    async with services.db.transaction() as conn:
        row = await queries.put_event_definition(conn, event_type=event_type, definition=declared)
        conn.announced()
        await record_key_action(
            conn,
            key,
            action="notifications.event_type_defined",
            target=event_type,
            data={"version": row["version"], "created": row["created"]},
        )
    await load_stored(services.db, registry)
    return Defined(event=registry.get(event_type), created=bool(row["created"]))


async def remove(services: Notifications, key: ActingKey, *, event_type: str) -> None:
    """Delete a stored event type (404 when there is none; 409 for the deployment's)."""
    _refuse_deployed(services.registry, event_type)
    async with services.db.transaction() as conn:
        if not await queries.delete_event_definition(conn, event_type=event_type):
            raise NotFound(f"No stored event type {event_type}")
        conn.announced()
        await record_key_action(
            conn, key, action="notifications.event_type_deleted", target=event_type
        )
    await load_stored(services.db, services.registry)
