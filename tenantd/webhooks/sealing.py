"""Endpoint signing secrets at rest: sealed with the same AES-256-GCM mechanism as TOTP secrets
(tenantd/crypto.py), under their own purpose label and bound to the endpoint's id, so a
sealed secret copied onto another endpoint does not open. Rows written before sealing (clear
`secret` / `previous_secret`) are sealed by the first instance to start; until then they are
read as they are."""

from __future__ import annotations

import logging
import uuid

from tenantd import crypto
from tenantd.crypto import UndecryptableSecret
from tenantd.db import Database, Row
from tenantd.settings import Settings
from tenantd.webhooks import queries

__all__ = ["UndecryptableSecret", "seal", "seal_clear_secrets", "signing_secrets", "unseal"]

ENDPOINT_SECRET_INFO = b"tenantd/webhooks/endpoint-secret/v1"

log = logging.getLogger(__name__)


def seal(settings: Settings, endpoint_id: uuid.UUID, secret: str) -> bytes:
    return crypto.seal(
        settings.secret_key, ENDPOINT_SECRET_INFO, secret.encode(), associated=endpoint_id.bytes
    )


def unseal(settings: Settings, endpoint_id: uuid.UUID, blob: bytes) -> str:
    return crypto.unseal(
        settings.secret_key, ENDPOINT_SECRET_INFO, blob, associated=endpoint_id.bytes
    ).decode()


def current_secret(settings: Settings, row: Row, endpoint_id: uuid.UUID) -> str:
    """The endpoint's signing secret (sealed, or clear in a row not sealed yet)."""
    if row["secret_sealed"] is not None:
        return unseal(settings, endpoint_id, row["secret_sealed"])
    clear: str = row["secret"]
    return clear


def signing_secrets(settings: Settings, row: Row) -> list[str]:
    """The secrets that sign a delivery: the current one, and the previous one while its
    rotation overlap lasts. UndecryptableSecret when SECRET_KEY is not the sealing one."""
    endpoint_id = row["endpoint_id"]
    secrets = [current_secret(settings, row, endpoint_id)]
    if row["previous_secret_live"]:
        if row["previous_secret_sealed"] is not None:
            secrets.append(unseal(settings, endpoint_id, row["previous_secret_sealed"]))
        elif row["previous_secret"]:
            secrets.append(row["previous_secret"])
    return secrets


async def seal_clear_secrets(db: Database, settings: Settings) -> int:
    """Seal every secret still held in clear and empty the clear columns (idempotent; safe
    with several instances starting at once: each row is taken under a skip-locked lock)."""
    sealed = 0
    while True:
        async with db.transaction() as conn:
            row = await conn.fetch_one(queries.LOCK_CLEAR_SECRET)
            if row is None:
                break
            endpoint_id = row["id"]
            current = row["secret_sealed"]
            if row["secret"] is not None:
                current = seal(settings, endpoint_id, row["secret"])
            previous = row["previous_secret_sealed"]
            if row["previous_secret"] is not None:
                previous = seal(settings, endpoint_id, row["previous_secret"])
            await conn.execute(
                queries.STORE_SEALED_SECRETS,
                {"id": endpoint_id, "current": current, "previous": previous},
            )
            sealed += 1
    if sealed:
        log.info("sealed the signing secrets of %d webhook endpoint(s)", sealed)
    return sealed
