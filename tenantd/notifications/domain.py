"""The notifications domain's service object: the kernel, the event types, the cache of inbox
answers and the identity domain it checks streams' tokens with, built once by the
composition root (tenantd/app/) and handed to views, jobs and the CLI."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from tenantd.bundle import DOMAINS, Domain
from tenantd.identity.domain import Identity
from tenantd.notifications.inbox_cache import InboxCache
from tenantd.notifications.registry import EventRegistry

if TYPE_CHECKING:
    import orjson


@dataclass(eq=False)
class Notifications(Domain):
    # Token checks of SSE streams.
    identity: Identity
    # Notification event types: the built-in ones (TENANTD_BUILTIN_NOTIFICATIONS), then
    # TENANTD_EVENT_MODULES (loaded before anything opens).
    registry: EventRegistry
    # Inbox answers (first pages, unread count), off until its listener runs.
    inbox_cache: InboxCache = field(default_factory=InboxCache)
    # GET /api/v1/notifications/event-types, serialised, with the registry version it lists.
    event_types_answer: tuple[int, orjson.Fragment] | None = None


class HasNotifications(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def notifications(self) -> Notifications: ...


def notifications_of(app: web.Application) -> Notifications:
    """This application's notifications domain (one dict lookup, one attribute)."""
    domains: HasNotifications = app[DOMAINS]
    return domains.notifications
