"""The session sweep: rows that only matter until they expire.

- `sessions`: refresh sessions past their expiry (a refresh with them is refused anyway).
- `revoked_tokens`: revoked access-token ids past the token's own expiry (the JWT `exp`
  refuses them from then on).
- `user_tokens`: verification and reset tokens a day after expiry (the day keeps the
  friendlier "expired" answer for late clicks).
- `email_codes`: sign-in codes and magic links a day after expiry, as `user_tokens`.
- `rate_limits`: counters whose window ended longer ago than the longest window.
- `webhook_events`: provider event ids older than TENANTD_WEBHOOK_EVENTS_RETENTION_DAYS
  (providers stop retrying, and signatures stop verifying, long before that).
- `known_devices`: browsers not seen for longer than their device cookie lives (400 days).
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func

from tenantd.db.tables import (
    email_codes,
    known_devices,
    rate_limits,
    revoked_tokens,
    sessions,
    user_tokens,
    webhook_events,
)
from tenantd.ops.config import ops_config
from tenantd.ops.sweeps import SweepContext, delete_batches, sweep

DEVICE_KEPT = timedelta(days=400)  # the device_id cookie's lifetime (tenantd/identity/devices.py)


@sweep("sessions", "Expired sessions, revoked tokens, user tokens, rate limits, webhook ids")
async def sessions_sweep(ctx: SweepContext) -> None:
    """Delete expired session-like rows in bounded batches."""
    config = ops_config(ctx.settings)
    now = func.now()
    await delete_batches(ctx, sessions, sessions.c.expires_at < now)
    await delete_batches(ctx, revoked_tokens, revoked_tokens.c.expires_at < now)
    await delete_batches(ctx, user_tokens, user_tokens.c.expires_at < now - timedelta(days=1))
    await delete_batches(ctx, email_codes, email_codes.c.expires_at < now - timedelta(days=1))
    window = timedelta(seconds=config.longest_rate_window)
    await delete_batches(ctx, rate_limits, rate_limits.c.window_start < now - window)
    retention = timedelta(days=config.webhook_events_retention_days)
    await delete_batches(ctx, webhook_events, webhook_events.c.received_at < now - retention)
    # A browser unseen for longer than its device cookie lives has lost the cookie anyway.
    await delete_batches(ctx, known_devices, known_devices.c.last_seen_at < now - DEVICE_KEPT)


SWEEPS = (sessions_sweep,)
