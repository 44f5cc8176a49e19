"""The auth domain's part of the session sweep."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func

from tenantd.db.tables import email_codes
from tenantd.ops.sweeps import SweepContext, delete_batches


async def expired_email_codes(ctx: SweepContext) -> None:
    """Sign-in codes and magic links a day after expiry (the day keeps the friendlier
    "expired" answer for late clicks)."""
    cutoff = func.now() - timedelta(days=1)
    await delete_batches(ctx, email_codes, email_codes.c.expires_at < cutoff)
