"""Provider A, Postmark: `POST {POSTMARK_API_URL}/email` with `X-Postmark-Server-Token`.

HTTP 422 with ErrorCode 406 means Postmark holds the recipient as inactive (hard bounce, spam
complaint or manual suppression); it is raised as RecipientSuppressed so the service mirrors it.
"""

from __future__ import annotations

import re
from typing import Any

import aiohttp

from tenantd.addresses import normalize_email
from tenantd.email.message import EmailMessage, EmailSendError, RecipientSuppressed
from tenantd.email.providers.api import JsonApiSender
from tenantd.email.providers.retry import Reply, RetryPolicy, refused

INACTIVE_RECIPIENT = 406
_FOUND = re.compile(r"Found inactive address(?:es)?:(?P<list>.*?)(?:Inactive recipients|$)", re.S)
_ADDRESS = re.compile(r"[^\s,;:<>\"']+@[^\s,;:<>\"']+")


def inactive_addresses(message: str) -> list[str]:
    """Addresses listed after 'Found inactive addresses:' in Postmark's 406 message."""
    match = _FOUND.search(message)
    if match is None:
        return []
    found: list[str] = []
    for raw in _ADDRESS.findall(match["list"]):
        address = normalize_email(raw.rstrip("."))
        if address not in found:
            found.append(address)
    return found


def payload(message: EmailMessage, *, sender: str, stream: str) -> dict[str, Any]:
    body: dict[str, Any] = {
        "From": sender,
        "To": message.to,
        "Subject": message.subject,
        "TextBody": message.text,
        "MessageStream": stream,
    }
    if message.html is not None:
        body["HtmlBody"] = message.html
    if message.headers:
        body["Headers"] = [{"Name": k, "Value": v} for k, v in message.headers.items()]
    if message.tag:
        body["Tag"] = message.tag
    return body


class PostmarkSender(JsonApiSender):
    name = "postmark"
    honours_key = False  # no idempotency key: the email service keeps a sent-marker
    path = "/email"

    def __init__(
        self,
        http: aiohttp.ClientSession,
        *,
        token: str,
        base_url: str,
        retry: RetryPolicy | None = None,
        stream: str = "outbound",
    ):
        super().__init__(http, base_url=base_url, retry=retry)
        self._token = token
        self.stream = stream

    def request_headers(self, message: EmailMessage) -> dict[str, str]:
        # Postmark has no idempotency key: the email service's sent-marker stands in for it.
        return {"X-Postmark-Server-Token": self._token}

    def body(self, message: EmailMessage, *, sender: str) -> dict[str, Any]:
        return payload(message, sender=sender, stream=self.stream)

    def interpret(self, reply: Reply, message: EmailMessage) -> str | None:
        data = reply.json()
        data = data if isinstance(data, dict) else {}
        code = data.get("ErrorCode")
        if reply.status == 200 and code in (0, None):
            message_id = data.get("MessageID")
            return str(message_id) if message_id is not None else None
        if reply.status == 422 and code == INACTIVE_RECIPIENT:
            text = data.get("Message")
            addresses = inactive_addresses(text) if isinstance(text, str) else []
            raise RecipientSuppressed(
                addresses or [normalize_email(message.to)], reason="inactive", provider=self.name
            )
        detail = f"ErrorCode {code}: {data.get('Message')}"
        if reply.status == 200:
            raise EmailSendError(f"postmark: {detail}", retryable=False)
        raise refused(self.name, reply, detail=detail)
