"""Signed one-click unsubscribe links (RFC 8058): turn off one event type's email channel.

The token is a JWT (HS256) with its own audience and a key derived from SECRET_KEY for this
purpose only, so it can never pass as an access token and an access token never passes here.
It carries no expiry: an unsubscribe link in an old email must keep working.

Two links carry the token: the List-Unsubscribe header names the API route (a mail client's
RFC 8058 one-click POST), the link in the body opens the hosted confirmation page when the
pages are on (TENANTD_UI), else the API route's own small confirmation page.
"""

from __future__ import annotations

import hashlib
import hmac
import html
import uuid
from dataclasses import dataclass
from urllib.parse import quote

import jwt

from tenantd.db import Database
from tenantd.errors import ValidationFailed
from tenantd.notifications import queries
from tenantd.settings import Settings

AUDIENCE = "tenantd:unsubscribe"
ISSUER = "tenantd"
PURPOSE = "unsubscribe"
PATH = "/api/v1/notifications/unsubscribe"
PAGE_PATH = "/unsubscribe"  # the hosted confirmation page (tenantd.ui)


@dataclass(frozen=True)
class UnsubscribeClaims:
    user_id: uuid.UUID
    event_type: str
    channel: str


def _key(secret_key: str) -> bytes:
    return hmac.new(
        secret_key.encode(), b"tenantd.notifications.unsubscribe", hashlib.sha256
    ).digest()


def make_token(secret_key: str, *, user_id: uuid.UUID, event_type: str) -> str:
    payload = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "purpose": PURPOSE,
        "sub": str(user_id),
        "evt": event_type,
        "ch": "email",
    }
    return jwt.encode(payload, _key(secret_key), algorithm="HS256")


def unsubscribe_url(public_base_url: str, token: str, *, path: str = PATH) -> str:
    return f"{public_base_url}{path}?token={quote(token, safe='')}"


def page_url(settings: Settings, token: str) -> str:
    """The link a person clicks in the email: the hosted page, or the API's when pages are off."""
    path = PAGE_PATH if settings.web.hosted_pages else PATH
    return unsubscribe_url(settings.public_base_url, token, path=path)


def read_token(secret_key: str, token: str) -> UnsubscribeClaims:
    """The claims of a valid token, or a 422 naming the token field."""
    try:
        payload = jwt.decode(
            token,
            _key(secret_key),
            algorithms=["HS256"],
            audience=AUDIENCE,
            issuer=ISSUER,
            options={"require": ["sub", "aud", "iss"]},
        )
        if payload.get("purpose") != PURPOSE or payload.get("ch") != "email":
            raise ValueError("wrong purpose")
        return UnsubscribeClaims(
            user_id=uuid.UUID(str(payload["sub"])),
            event_type=str(payload["evt"]),
            channel="email",
        )
    except (jwt.PyJWTError, ValueError, KeyError, TypeError):
        raise ValidationFailed({"token": "invalid unsubscribe token"}) from None


async def unsubscribe(db: Database, *, secret_key: str, token: str) -> UnsubscribeClaims:
    """Turn off the email channel of the token's event type for the token's user."""
    claims = read_token(secret_key, token)
    async with db.connection() as conn:
        await queries.set_preference(
            conn,
            user_id=claims.user_id,
            event_type=claims.event_type,
            channel="email",
            enabled=False,
        )
    return claims


def confirmation_page(secret_key: str, token: str) -> str:
    """A small page whose button POSTs the one-click unsubscribe (GET changes nothing)."""
    claims = read_token(secret_key, token)
    event = html.escape(claims.event_type)
    action = html.escape(f"{PATH}?token={quote(token, safe='')}")
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>Unsubscribe</title></head>'
        f"<body><p>Stop emails about <strong>{event}</strong>?</p>"
        f'<form method="post" action="{action}">'
        '<input type="hidden" name="List-Unsubscribe" value="One-Click">'
        '<button type="submit">Unsubscribe</button></form></body></html>'
    )
