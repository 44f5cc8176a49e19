"""Web push subscriptions: validated (endpoint policy, key formats) before they are stored;
the keys must be a P-256 point (65 bytes) and a 16-byte auth secret, base64url."""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import uuid
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec

from tenantd.bundle import Services
from tenantd.errors import ValidationFailed
from tenantd.notifications import queries
from tenantd.notifications.channels.web_push.hosts import endpoint_problem
from tenantd.notifications.channels.web_push.vapid import require_push
from tenantd.notifications.schemas import subscription_json
from tenantd.notifications.settings import NotificationSettings
from tenantd.settings import Settings


def _b64url(value: str) -> bytes:
    if not value or any(ch not in _B64URL for ch in value.rstrip("=")):
        raise ValueError("not base64url")
    return base64.urlsafe_b64decode(value.rstrip("=") + "=" * (-len(value.rstrip("=")) % 4))


_B64URL = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def check_subscription(settings: Settings, endpoint: str, p256dh: str, auth: str) -> None:
    """SSRF policy for the endpoint and the key formats; 422 naming the bad fields."""
    fields: dict[str, str] = {}
    problem = endpoint_problem(settings, endpoint)
    if problem:
        fields["endpoint"] = problem
    try:
        point = _b64url(p256dh)
        if len(point) != 65 or point[0] != 4:
            raise ValueError("length")
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), point)
    except (ValueError, binascii.Error):
        fields["keys.p256dh"] = "must be a base64url uncompressed P-256 point (65 bytes)"
    try:
        if len(_b64url(auth)) != 16:
            raise ValueError("length")
    except (ValueError, binascii.Error):
        fields["keys.auth"] = "must be a base64url 16-byte secret"
    if fields:
        raise ValidationFailed(fields)


async def subscribe(
    services: Services,
    *,
    user_id: uuid.UUID,
    endpoint: str,
    p256dh: str,
    auth: str,
    expiration_ms: float | None,
    user_agent: str | None,
) -> dict[str, Any]:
    """Validate (SSRF policy, key formats) and upsert on (user, endpoint); keys rotate; over
    WEB_PUSH_MAX_SUBSCRIPTIONS_PER_USER the user's oldest subscription is replaced."""
    settings = services.settings
    require_push(settings)
    check_subscription(settings, endpoint, p256dh, auth)
    expires_at = None
    if expiration_ms is not None:
        try:
            expires_at = dt.datetime.fromtimestamp(expiration_ms / 1000, tz=dt.UTC)
        except (OverflowError, OSError, ValueError):
            raise ValidationFailed({"expirationTime": "not a valid timestamp"}) from None
    async with services.db.transaction() as conn:
        await queries.lock_push_subscriptions(conn, user_id=user_id)
        row = await queries.upsert_subscription(
            conn,
            user_id=user_id,
            endpoint=endpoint,
            p256dh=p256dh,
            auth=auth,
            user_agent=(user_agent or "")[:512] or None,
            expires_at=expires_at,
            keep_at_most=settings.section(NotificationSettings).web_push_max_subscriptions_per_user,
        )
    return subscription_json(row)


async def unsubscribe(services: Services, *, user_id: uuid.UUID, endpoint: str) -> dict[str, bool]:
    """Remove the user's subscription of this endpoint; answers whether there was one."""
    require_push(services.settings)
    async with services.db.connection() as conn:
        removed = await queries.delete_subscription(conn, user_id=user_id, endpoint=endpoint)
    return {"removed": removed > 0}


async def subscriptions(services: Services, *, user_id: uuid.UUID) -> list[dict[str, Any]]:
    """The user's push subscriptions."""
    require_push(services.settings)
    async with services.db.connection() as conn:
        rows = await queries.list_subscriptions(conn, user_id=user_id)
    return [subscription_json(row) for row in rows]
