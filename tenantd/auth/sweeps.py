"""The auth domain's part of the session sweep."""

from __future__ import annotations

from tenantd.auth import queries
from tenantd.ops.sweeps import SweepContext, delete_batches


async def expired_email_codes(ctx: SweepContext) -> None:
    """Sign-in codes and magic links a day after expiry (the day keeps the friendlier
    "expired" answer for late clicks)."""
    await delete_batches(ctx, *queries.expired_email_codes())
