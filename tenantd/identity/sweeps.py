"""Identity's part of the session sweep: rows that only matter until they expire.

- `sessions`: refresh sessions past their expiry (a refresh with them is refused anyway).
- `revoked_tokens`: revoked access-token ids past the token's own expiry (the JWT `exp`
  refuses them from then on).
- `user_tokens`: verification and reset tokens a day after expiry (the day keeps the
  friendlier "expired" answer for late clicks).
- `known_devices`: browsers not seen for longer than their device cookie lives (400 days).

The `sessions` sweep (tenantd/app/plugins.py) runs this with the other domains' expired rows;
the `mfa` sweep runs `ended_session_auth`.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import exists, func, select

from tenantd.db.tables import known_devices, revoked_tokens, session_auth, sessions, user_tokens
from tenantd.ops.sweeps import SweepContext, delete_batches

DEVICE_KEPT = timedelta(days=400)  # the device_id cookie's lifetime (tenantd/identity/devices.py)


async def expired_session_rows(ctx: SweepContext) -> None:
    """Delete expired sessions, revoked token ids, user tokens and forgotten devices."""
    now = func.now()
    await delete_batches(ctx, sessions, sessions.c.expires_at < now)
    await delete_batches(ctx, revoked_tokens, revoked_tokens.c.expires_at < now)
    await delete_batches(ctx, user_tokens, user_tokens.c.expires_at < now - timedelta(days=1))
    # A browser unseen for longer than its device cookie lives has lost the cookie anyway.
    await delete_batches(ctx, known_devices, known_devices.c.last_seen_at < now - DEVICE_KEPT)


async def ended_session_auth(ctx: SweepContext) -> None:
    """The sign-in record (amr, auth_time) of session families that no longer have a session
    row (an hour old at least, so a family being created is never caught)."""
    family_alive = exists(
        select(sessions.c.id).where(sessions.c.family_id == session_auth.c.family_id)
    )
    await delete_batches(
        ctx,
        session_auth,
        (session_auth.c.created_at < func.now() - timedelta(hours=1)) & ~family_alive,
    )
