"""What the notifications domain needs beyond the shared services: its event registry."""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from tenantd.notifications.registry import EventRegistry
from tenantd.services import Services


class NotificationServices(Services, Protocol):
    @property
    def registry(self) -> EventRegistry: ...


NOTIFICATION_SERVICES: web.AppKey[NotificationServices] = web.AppKey("notification_services")
