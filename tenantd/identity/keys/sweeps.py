"""The `keys` sweep: a signing key exists, rotation every ACCESS_TOKEN_KEY_ROTATION_DAYS
(or when ACCESS_TOKEN_ALG changed), retired keys lose their private part, long-expired rows
go. Safe to run twice at once: the sweep's advisory lock, and every change under the keys
lock in one transaction."""

from __future__ import annotations

import logging

from tenantd.identity.keys import service
from tenantd.ops.sweeps import SweepContext, sweep

log = logging.getLogger(__name__)


@sweep("keys", "Access-token signing keys: rotate when due, wipe retired private keys")
async def keys_sweep(ctx: SweepContext) -> dict[str, int]:
    """Rotate the signing key when due; tidy retired keys."""
    if ctx.dry_run:
        return {}
    async with ctx.db.transaction() as conn:
        did = await service.ensure(conn, ctx.settings)
        counts = await service.maintain(conn)
    if did:
        log.info("signing keys: %s", did)
    return {**counts, "signing_keys_rotated": int(bool(did and did.startswith("rotated")))}


SWEEPS = (keys_sweep,)
