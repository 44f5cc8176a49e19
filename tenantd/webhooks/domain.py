"""The webhooks domain's service object: the kernel and the process's delivery sender, built
once by the composition root (tenantd/app/) and handed to views, jobs and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from aiohttp import web

from tenantd.bundle import DOMAINS, Domain
from tenantd.webhooks.sender import WebhookSender


@dataclass(eq=False)
class Webhooks(Domain):
    # Outbound webhook deliveries: one HTTP session (no redirects, metadata refused).
    sender: WebhookSender


class HasWebhooks(Protocol):
    """What the composition root's `Domains` record offers this domain."""

    @property
    def webhooks(self) -> Webhooks: ...


def webhooks_of(app: web.Application) -> Webhooks:
    """This application's webhooks domain (one dict lookup, one attribute)."""
    domains: HasWebhooks = app[DOMAINS]
    return domains.webhooks
