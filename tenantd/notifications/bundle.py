"""The notifications domain's view of the services bundle: the shared Protocol plus its event
registry and its cache of inbox answers."""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from tenantd.identity.bundle import IdentityServices
from tenantd.notifications.inbox_cache import InboxCache
from tenantd.notifications.registry import EventRegistry


class NotificationServices(IdentityServices, Protocol):
    @property
    def registry(self) -> EventRegistry: ...

    @property
    def inbox_cache(self) -> InboxCache: ...


NOTIFICATION_SERVICES: web.AppKey[NotificationServices] = web.AppKey("notification_services")
