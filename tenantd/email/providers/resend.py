"""Provider B, Resend: `POST {RESEND_API_URL}/emails` with a bearer API key.

Every send carries an `Idempotency-Key`, the same on each retry, so a retried request whose
first try did reach Resend is not delivered twice.
"""

from __future__ import annotations

import re
import uuid
from typing import Any

import aiohttp

from tenantd.email.message import EmailMessage
from tenantd.email.providers.api import JsonApiSender
from tenantd.email.providers.retry import Reply, RetryPolicy, refused

_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # Resend tag names/values allow only these


def payload(message: EmailMessage, *, sender: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "from": sender,
        "to": [message.to],
        "subject": message.subject,
        "text": message.text,
    }
    if message.html is not None:
        body["html"] = message.html
    if message.headers:
        body["headers"] = dict(message.headers)
    if message.tag:
        body["tags"] = [{"name": "category", "value": _TAG_UNSAFE.sub("_", message.tag)[:256]}]
    return body


class ResendSender(JsonApiSender):
    name = "resend"
    path = "/emails"

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

    def request_headers(self) -> dict[str, str]:
        # One key per message, kept across retries, so a retry can never deliver twice.
        return {"Authorization": f"Bearer {self._api_key}", "Idempotency-Key": str(uuid.uuid4())}

    def body(self, message: EmailMessage, *, sender: str) -> dict[str, Any]:
        return payload(message, sender=sender)

    def interpret(self, reply: Reply, message: EmailMessage) -> str | None:
        data = reply.json()
        data = data if isinstance(data, dict) else {}
        if 200 <= reply.status < 300:
            message_id = data.get("id")
            return str(message_id) if message_id is not None else None
        detail = f"{data.get('name')}: {data.get('message')}" if data else None
        raise refused(self.name, reply, detail=detail)
