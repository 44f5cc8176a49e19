"""What the HTTP email APIs share: POST a JSON body with bounded retries, read the reply."""

from __future__ import annotations

from typing import Any

import aiohttp

from tenantd.email.message import EmailMessage
from tenantd.email.providers.retry import Reply, RetryPolicy, post_json


class JsonApiSender:
    """A provider's send endpoint; subclasses say how to authenticate, encode and read."""

    name: str
    path: str  # appended to the configured base URL

    def __init__(
        self, http: aiohttp.ClientSession, *, base_url: str, retry: RetryPolicy | None = None
    ):
        self.http = http
        self.url = base_url.rstrip("/") + self.path
        self.retry = retry or RetryPolicy()

    def request_headers(self, message: EmailMessage) -> dict[str, str]:
        raise NotImplementedError

    def body(self, message: EmailMessage, *, sender: str) -> dict[str, Any]:
        raise NotImplementedError

    def interpret(self, reply: Reply, message: EmailMessage) -> str | None:
        """The provider's message id, or raise EmailSendError / RecipientSuppressed."""
        raise NotImplementedError

    async def send(self, message: EmailMessage, *, sender: str) -> str | None:
        reply = await post_json(
            self.http,
            self.url,
            payload=self.body(message, sender=sender),
            headers=self.request_headers(message),  # built once: retries reuse them (idempotency)
            policy=self.retry,
            provider=self.name,
        )
        return self.interpret(reply, message)


class ApiKeySender(JsonApiSender):
    """A provider that authenticates with one API key (Resend, SendGrid)."""

    def __init__(
        self,
        http: aiohttp.ClientSession,
        *,
        api_key: str,
        base_url: str,
        retry: RetryPolicy | None = None,
    ):
        super().__init__(http, base_url=base_url, retry=retry)
        self._api_key = api_key
