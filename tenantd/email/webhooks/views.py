"""The two signed provider webhooks. The raw body is read once, here, and verified as is."""

from __future__ import annotations

from aiohttp import web

from tenantd.db import DATABASE
from tenantd.email.webhooks import resend, sendgrid
from tenantd.errors import NotFound
from tenantd.settings import SETTINGS
from tenantd.web.body import read_limited
from tenantd.web.schemas import ApiModel
from tenantd.web.spec import CURRENT_ROUTE, Access, Routes

routes = Routes("webhooks")

RESPONSES = {401: "Signature, timestamp or headers invalid", 404: "Webhook not configured"}


class WebhookReceipt(ApiModel):
    events: int
    recorded: int
    duplicates: int
    ignored: int
    malformed: int


@routes.post(
    "/api/v1/webhooks/resend",
    access=Access.SIGNATURE,
    response=WebhookReceipt,
    responses=RESPONSES,
    summary="Resend (Svix-signed) email.bounced / email.complained events",
)
async def resend_webhook(request: web.Request) -> dict[str, int]:
    secret = request.app[SETTINGS].resend_webhook_secret
    if not secret:
        raise NotFound()
    body = await read_limited(request, request[CURRENT_ROUTE].body_limit)
    outcome = await resend.receive(
        request.app[DATABASE], secret=secret, headers=request.headers, body=body
    )
    return outcome.as_json()


@routes.post(
    "/api/v1/webhooks/sendgrid",
    access=Access.SIGNATURE,
    response=WebhookReceipt,
    responses=RESPONSES,
    summary="SendGrid signed Event Webhook batch (bounce, spamreport, dropped)",
)
async def sendgrid_webhook(request: web.Request) -> dict[str, int]:
    key = request.app[SETTINGS].sendgrid_webhook_public_key
    if not key:
        raise NotFound()
    body = await read_limited(request, request[CURRENT_ROUTE].body_limit)
    outcome = await sendgrid.receive(
        request.app[DATABASE], public_key_text=key, headers=request.headers, body=body
    )
    return outcome.as_json()
