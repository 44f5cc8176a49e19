"""Provider C, SendGrid: `POST {SENDGRID_API_URL}/v3/mail/send` with a bearer API key.

SendGrid answers 202 with an empty body; the message id is the `X-Message-Id` header.

SendGrid's v3 Mail Send has no idempotency key: a request sent twice is mailed twice. A keyed
message carries its key in `custom_args` (`idempotency_key`), which SendGrid echoes in its
event webhooks (a send can be traced to its job), and the email service keeps a sent-marker so
a job run again does not call SendGrid for a message it already accepted.
"""

from __future__ import annotations

import email.utils
from typing import Any

from tenantd.email.message import EmailMessage
from tenantd.email.providers.api import ApiKeySender
from tenantd.email.providers.retry import Reply, refused


def address(value: str) -> dict[str, str]:
    name, mail = email.utils.parseaddr(value)
    result = {"email": mail or value.strip()}
    if name:
        result["name"] = name
    return result


def payload(message: EmailMessage, *, sender: str) -> dict[str, Any]:
    # text/plain must come before text/html in `content`.
    content = [{"type": "text/plain", "value": message.text}]
    if message.html is not None:
        content.append({"type": "text/html", "value": message.html})
    body: dict[str, Any] = {
        "personalizations": [{"to": [{"email": message.to}]}],
        "from": address(sender),
        "subject": message.subject,
        "content": content,
    }
    if message.headers:
        body["headers"] = dict(message.headers)
    if message.tag:
        body["categories"] = [message.tag[:255]]
    if message.idempotency_key:
        body["custom_args"] = {"idempotency_key": message.idempotency_key}
    return body


class SendGridSender(ApiKeySender):
    name = "sendgrid"
    honours_key = False  # SendGrid's Mail Send takes no idempotency key (see the module doc)
    path = "/v3/mail/send"

    def request_headers(self, message: EmailMessage) -> dict[str, str]:
        # SendGrid has no idempotency key: the email service's sent-marker stands in for it.
        return {"Authorization": f"Bearer {self._api_key}"}

    def body(self, message: EmailMessage, *, sender: str) -> dict[str, Any]:
        return payload(message, sender=sender)

    def interpret(self, reply: Reply, message: EmailMessage) -> str | None:
        if 200 <= reply.status < 300:
            return reply.headers.get("X-Message-Id")
        data = reply.json()
        errors = data.get("errors") if isinstance(data, dict) else None
        detail = None
        if isinstance(errors, list) and errors:
            detail = "; ".join(str(e.get("message")) for e in errors[:3] if isinstance(e, dict))
        raise refused(self.name, reply, detail=detail)
