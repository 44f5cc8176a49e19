"""The HTTP side of deliveries: one session for every delivery of this process, Standard
Webhooks signatures, and what one attempt came to (`Outcome`)."""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from standardwebhooks.webhooks import Webhook

from tenantd.settings import Settings
from tenantd.webhooks.addresses import (
    ForbiddenAddress,
    GuardedResolver,
    forbidden_ip,
    refusal,
    refuse_private,
)
from tenantd.webhooks.settings import WebhookSettings

SEND_BUDGET_SECONDS = 45.0  # a batch's send budget at most (the job's timeout keeps room)
MAX_ERROR = 500


class WebhookSender:
    """One HTTP session for every delivery of this process (keep-alive, no redirects,
    metadata addresses refused at connect time)."""

    def __init__(self, settings: Settings, *, resolver: Any = None):
        # A batch's send budget (at most SEND_BUDGET_SECONDS: the job's timeout keeps room to
        # settle), and one request's whole time (a free connection, connect, send, answer),
        # never more than the budget, so the first delivery of a batch always fits.
        self.send_budget = min(
            settings.section(WebhookSettings).webhook_send_budget_seconds,
            SEND_BUDGET_SECONDS,
        )
        self.request_seconds = min(
            settings.section(WebhookSettings).webhook_timeout_seconds, self.send_budget
        )
        self.timeout = aiohttp.ClientTimeout(total=self.request_seconds)
        self._resolver = resolver
        self.refuse_private = refuse_private(settings)
        self._session: aiohttp.ClientSession | None = None
        self._signers: dict[str, Webhook] = {}
        # Counters for /metrics and logs (this process).
        self.disabled_endpoints = 0
        self.sent = 0
        self.failed = 0

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self._resolver, refuse_private=self.refuse_private),
                limit=256,
                ttl_dns_cache=10,
            )
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=self.timeout, trust_env=False
            )
        return self._session

    def signer(self, secret: str) -> Webhook:
        signer = self._signers.get(secret)
        if signer is None:
            if len(self._signers) > 1000:
                self._signers.clear()
            signer = self._signers[secret] = Webhook(secret)
        return signer

    def headers(self, msg_id: str, body: str, secrets: Sequence[str]) -> dict[str, str]:
        """Standard Webhooks headers; with a rotation under way, one signature per secret."""
        now = dt.datetime.now(dt.UTC)
        signatures = " ".join(self.signer(s).sign(msg_id, now, body) for s in secrets)
        return {
            "webhook-id": msg_id,
            "webhook-timestamp": str(int(now.timestamp())),
            "webhook-signature": signatures,
            "content-type": "application/json",
            "user-agent": "tenantd-webhooks",
        }

    async def send(self, url: str, msg_id: str, body: str, secrets: Sequence[str]) -> Outcome:
        host = _host(url)
        if forbidden_ip(host, refuse_private=self.refuse_private):
            return Outcome(False, None, refusal(host, self.refuse_private))
        headers = self.headers(msg_id, body, secrets)
        try:
            async with self.session().post(
                url, data=body.encode(), headers=headers, allow_redirects=False
            ) as response:
                await response.read()
                if 200 <= response.status < 300:
                    return Outcome(True, response.status, None)
                return Outcome(False, response.status, f"HTTP {response.status}")
        except ForbiddenAddress as error:
            return Outcome(False, None, str(error))
        except aiohttp.ClientConnectorError as error:
            cause = error.os_error
            if isinstance(cause, ForbiddenAddress):
                return Outcome(False, None, str(cause))
            return Outcome(False, None, f"connect: {error}"[:MAX_ERROR])
        except TimeoutError:
            return Outcome(False, None, "timeout")
        except (aiohttp.ClientError, OSError) as error:
            return Outcome(False, None, f"{type(error).__name__}: {error}"[:MAX_ERROR])

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


@functools.lru_cache(maxsize=4096)
def _host(url: str) -> str:
    return urlsplit(url).hostname or ""


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    status: int | None
    error: str | None
