"""Provider B, Resend: `POST {RESEND_API_URL}/emails` with a bearer API key.

Every send carries an `Idempotency-Key` (Resend keeps it 24 hours): the message's own key when
it has one (a notification delivery's id, so a job that runs again after a crash does not mail
twice), else a fresh one that every retry of this send repeats.
Resend answers 409 `concurrent_idempotent_requests` while another request with the key is in
flight (retried later), and 409 `invalid_idempotent_request` when the key was already used
with another body: the delivery was accepted before, so that counts as sent.
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from tenantd.email.message import EmailMessage, EmailSendError
from tenantd.email.providers.api import ApiKeySender
from tenantd.email.providers.retry import Reply, refused

log = logging.getLogger(__name__)

_TAG_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # Resend tag names/values allow only these
MAX_IDEMPOTENCY_KEY = 256
KEY_IN_FLIGHT = "concurrent_idempotent_requests"
KEY_USED_FOR_ANOTHER_BODY = "invalid_idempotent_request"


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


class ResendSender(ApiKeySender):
    name = "resend"
    honours_key = True  # Resend keeps each Idempotency-Key 24 hours and sends once per key
    path = "/emails"

    def request_headers(self, message: EmailMessage) -> dict[str, str]:
        key = message.idempotency_key or str(uuid.uuid4())
        return {
            "Authorization": f"Bearer {self._api_key}",
            "Idempotency-Key": key[:MAX_IDEMPOTENCY_KEY],
        }

    def body(self, message: EmailMessage, *, sender: str) -> dict[str, Any]:
        return payload(message, sender=sender)

    def interpret(self, reply: Reply, message: EmailMessage) -> str | None:
        data = reply.json()
        data = data if isinstance(data, dict) else {}
        if 200 <= reply.status < 300:
            message_id = data.get("id")
            return str(message_id) if message_id is not None else None
        detail = f"{data.get('name')}: {data.get('message')}" if data else None
        if reply.status == 409 and data.get("name") == KEY_IN_FLIGHT:
            raise EmailSendError(f"{self.name}: HTTP 409: {detail}", retryable=True)
        if reply.status == 409 and data.get("name") == KEY_USED_FOR_ANOTHER_BODY:
            log.warning(
                "email already sent under this idempotency key; not sent again",
                extra={"provider": self.name, "tag": message.tag},
            )
            return None
        raise refused(self.name, reply, detail=detail)
