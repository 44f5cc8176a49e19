"""One in-process aiohttp app standing in for Postmark, Resend and SendGrid.

Idempotency as each provider has it: Resend sends once per `Idempotency-Key` (24 hours, the
same body answers the first id, another body is 409); Postmark and SendGrid have no key, so
the same request twice is delivered twice (SendGrid takes `custom_args` and only echoes them).

It speaks each provider's real request and response shapes (authentication headers, required
fields, success bodies, error bodies), records every request, and can be told to fail:
`fake.fail("postmark", 503, times=2)`, `fake.drop("resend")` (connection cut),
`fake.postmark_inactive("a@b.com", "c@d.com")` (HTTP 422, ErrorCode 406), or hold a request
unanswered until the test releases it (`release = fake.hold("postmark")`; `release.set()`).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

POSTMARK_TOKEN = "pm-server-token-0123456789"
RESEND_KEY = "re_test_0123456789abcdef"
SENDGRID_KEY = "SG.test-0123456789.abcdefghijklmnop"

POSTMARK_INACTIVE_TEMPLATE = (
    "You tried to send to recipient(s) that have been marked as inactive. Found inactive "
    "addresses: {addresses}. Inactive recipients are ones that have generated a hard bounce, "
    "a spam complaint, or a manual suppression."
)


PATHS = {"/email": "postmark", "/emails": "resend", "/v3/mail/send": "sendgrid"}


@dataclass
class Recorded:
    provider: str
    path: str
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return orjson.loads(self.body)


@dataclass
class Scripted:
    status: int = 500
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    drop: bool = False  # cut the connection instead of answering
    delay: float = 0.0  # answer late (client timeouts)
    gate: asyncio.Event | None = None  # answer only once the test sets it


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        status=status,
        body=orjson.dumps(body),
        content_type="application/json",
        headers=headers,
    )


class FakeProviders:
    def __init__(self) -> None:
        self.url = ""  # set once the server listens
        self.requests: list[Recorded] = []
        self.scripts: dict[str, deque[Scripted]] = {
            "postmark": deque(),
            "resend": deque(),
            "sendgrid": deque(),
        }
        self.resend_idempotency: dict[str, str] = {}  # Idempotency-Key -> message id
        self.resend_idempotent_bodies: dict[str, bytes] = {}  # Idempotency-Key -> first body
        self.delivered: list[Recorded] = []  # messages accepted for delivery (not replays)
        # Requests whose answer waits (after the provider accepted them) for a gate.
        self.answer_gates: dict[str, deque[asyncio.Event]] = {p: deque() for p in self.scripts}
        self.app = web.Application(middlewares=[self._late_answer])
        self.app.router.add_post("/email", self.postmark)
        self.app.router.add_post("/emails", self.resend)
        self.app.router.add_post("/v3/mail/send", self.sendgrid)

    # --- scripting ---------------------------------------------------------------------------

    def fail(self, provider: str, status: int, *, times: int = 1, body: Any = None) -> None:
        for _ in range(times):
            self.scripts[provider].append(Scripted(status=status, body=body))

    def drop(self, provider: str, *, times: int = 1) -> None:
        for _ in range(times):
            self.scripts[provider].append(Scripted(drop=True))

    def slow(self, provider: str, seconds: float, *, times: int = 1) -> None:
        for _ in range(times):
            self.scripts[provider].append(Scripted(status=200, delay=seconds))

    def hold(self, provider: str) -> asyncio.Event:
        """The next request waits, unanswered, until the returned event is set."""
        gate = asyncio.Event()
        self.scripts[provider].append(Scripted(status=200, gate=gate))
        return gate

    def hold_answer(self, provider: str, *, times: int = 1) -> asyncio.Event:
        """The next requests are accepted (sent, keys kept) but answered only once the
        returned event is set: a client that dies meanwhile never learns they were sent."""
        gate = asyncio.Event()
        for _ in range(times):
            self.answer_gates[provider].append(gate)
        return gate

    def postmark_inactive(self, *addresses: str, message: str | None = None) -> None:
        text = message or POSTMARK_INACTIVE_TEMPLATE.format(addresses=", ".join(addresses))
        self.fail("postmark", 422, body={"ErrorCode": 406, "Message": text})

    def sent(self, provider: str) -> list[Recorded]:
        return [r for r in self.requests if r.provider == provider]

    # --- plumbing ----------------------------------------------------------------------------

    @web.middleware
    async def _late_answer(self, request: web.Request, handler: Any) -> web.StreamResponse:
        response: web.StreamResponse = await handler(request)
        provider = PATHS.get(request.path)
        if provider is not None and self.answer_gates[provider]:
            await self.answer_gates[provider].popleft().wait()
        return response

    async def _record(self, provider: str, request: web.Request) -> Recorded:
        recorded = Recorded(provider, request.path, dict(request.headers), await request.read())
        self.requests.append(recorded)
        return recorded

    async def _scripted(self, provider: str, request: web.Request) -> web.Response | None:
        if not self.scripts[provider]:
            return None
        script = self.scripts[provider].popleft()
        if script.drop:
            assert request.transport is not None
            request.transport.abort()
            raise asyncio.CancelledError  # the handler stops; the client sees a disconnect
        if script.gate is not None:
            await script.gate.wait()
            return None  # answered late, normally
        if script.delay:
            await asyncio.sleep(script.delay)
            return None  # answered late, normally
        if script.body is None:
            return web.Response(status=script.status, text="upstream error")
        return _json(script.status, script.body, script.headers)

    # --- Postmark: POST /email ---------------------------------------------------------------

    async def postmark(self, request: web.Request) -> web.Response:
        recorded = await self._record("postmark", request)
        scripted = await self._scripted("postmark", request)
        if scripted is not None:
            return scripted
        token = request.headers.get("X-Postmark-Server-Token")
        if not token:
            return _json(
                401,
                {
                    "ErrorCode": 10,
                    "Message": "No Account or Server API tokens were supplied in the HTTP "
                    "headers. Please add a header for either X-Postmark-Server-Token or "
                    "X-Postmark-Account-Token.",
                },
            )
        if token != POSTMARK_TOKEN:
            return _json(
                401, {"ErrorCode": 10, "Message": "Request does not contain a valid Server token."}
            )
        try:
            data = recorded.json
        except orjson.JSONDecodeError:
            return _json(422, {"ErrorCode": 402, "Message": "Received invalid JSON input."})
        if not data.get("From"):
            return _json(422, {"ErrorCode": 300, "Message": "Invalid 'From' address: ''."})
        if not data.get("To"):
            return _json(422, {"ErrorCode": 300, "Message": "Zero recipients specified"})
        if not (data.get("TextBody") or data.get("HtmlBody")):
            return _json(
                422,
                {"ErrorCode": 300, "Message": "Provide either email TextBody or HtmlBody or both."},
            )
        headers = data.get("Headers", [])
        if not isinstance(headers, list) or any(
            not isinstance(h, dict) or set(h) != {"Name", "Value"} for h in headers
        ):
            return _json(422, {"ErrorCode": 300, "Message": "Invalid 'Headers' value."})
        self.delivered.append(recorded)
        return _json(
            200,
            {
                "To": data["To"],
                "SubmittedAt": dt.datetime.now(dt.UTC).isoformat(),
                "MessageID": str(uuid.uuid4()),
                "ErrorCode": 0,
                "Message": "OK",
            },
        )

    # --- Resend: POST /emails ----------------------------------------------------------------

    async def resend(self, request: web.Request) -> web.Response:
        recorded = await self._record("resend", request)
        scripted = await self._scripted("resend", request)
        if scripted is not None:
            return scripted
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer "):
            return _json(
                401,
                {
                    "statusCode": 401,
                    "message": "Missing API key in the authorization header. Include the "
                    "following header 'Authorization: Bearer YOUR_API_KEY' in the request.",
                    "name": "missing_api_key",
                },
            )
        if auth != f"Bearer {RESEND_KEY}":
            return _json(
                403, {"statusCode": 403, "message": "API key is invalid", "name": "invalid_api_key"}
            )
        try:
            data = recorded.json
        except orjson.JSONDecodeError:
            return _json(
                422,
                {"statusCode": 422, "message": "Invalid JSON body", "name": "validation_error"},
            )
        for name in ("from", "to", "subject"):
            if not data.get(name):
                return _json(
                    422,
                    {
                        "statusCode": 422,
                        "message": f"Missing `{name}` field.",
                        "name": "missing_required_field",
                    },
                )
        # Idempotency keys as Resend documents them: 1-256 characters; the same key and body
        # again answer the first id without sending; the same key with another body is 409.
        key = request.headers.get("Idempotency-Key")
        if key is not None and not 1 <= len(key) <= 256:
            return _json(
                400,
                {
                    "statusCode": 400,
                    "message": "The key must be between 1-256 chars.",
                    "name": "invalid_idempotency_key",
                },
            )
        if key and key in self.resend_idempotency:
            if self.resend_idempotent_bodies[key] != recorded.body:
                return _json(
                    409,
                    {
                        "statusCode": 409,
                        "message": "Same idempotency key used with a different request payload.",
                        "name": "invalid_idempotent_request",
                    },
                )
            return _json(200, {"id": self.resend_idempotency[key]})
        message_id = str(uuid.uuid4())
        if key:
            self.resend_idempotency[key] = message_id
            self.resend_idempotent_bodies[key] = recorded.body
        self.delivered.append(recorded)
        return _json(200, {"id": message_id})

    # --- SendGrid: POST /v3/mail/send --------------------------------------------------------

    @staticmethod
    def _sendgrid_error(status: int, message: str, field_name: str | None) -> web.Response:
        return _json(status, {"errors": [{"message": message, "field": field_name, "help": None}]})

    async def sendgrid(self, request: web.Request) -> web.Response:
        recorded = await self._record("sendgrid", request)
        scripted = await self._scripted("sendgrid", request)
        if scripted is not None:
            return scripted
        if request.headers.get("Authorization") != f"Bearer {SENDGRID_KEY}":
            return self._sendgrid_error(
                401, "The provided authorization grant is invalid, expired, or revoked", None
            )
        try:
            data = recorded.json
        except orjson.JSONDecodeError:
            return self._sendgrid_error(400, "Bad Request", None)
        personalizations = data.get("personalizations")
        if not personalizations or not all(p.get("to") for p in personalizations):
            return self._sendgrid_error(
                400, "The personalizations field is required.", "personalizations"
            )
        sender = data.get("from")
        if not isinstance(sender, dict) or not sender.get("email"):
            return self._sendgrid_error(
                400, "The from object must be provided for every email send.", "from"
            )
        if not data.get("subject"):
            return self._sendgrid_error(400, "The subject is required.", "subject")
        content = data.get("content") or []
        if not content:
            return self._sendgrid_error(
                400,
                "Unless a valid template_id is provided, the content parameter is required.",
                "content",
            )
        custom_args = data.get("custom_args", {})
        if not isinstance(custom_args, dict) or not all(
            isinstance(v, str) for v in custom_args.values()
        ):
            return self._sendgrid_error(
                400, "Custom args must be an object of string values.", "custom_args"
            )
        types = [c.get("type") for c in content]
        if "text/plain" in types and types[0] != "text/plain":
            return self._sendgrid_error(
                400, "If present, text/plain content must be first.", "content"
            )
        self.delivered.append(recorded)
        return web.Response(status=202, headers={"X-Message-Id": uuid.uuid4().hex[:22]})
