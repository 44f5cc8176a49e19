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

from tenantd.identity import queries
from tenantd.ops.sweeps import SweepContext, delete_batches


async def expired_session_rows(ctx: SweepContext) -> None:
    """Delete expired sessions, revoked token ids, user tokens and forgotten devices."""
    for purge in queries.expired_session_rows():
        await delete_batches(ctx, *purge)


async def ended_session_auth(ctx: SweepContext) -> None:
    """The sign-in record (amr, auth_time) of session families that no longer have a session
    row (an hour old at least, so a family being created is never caught)."""
    await delete_batches(ctx, *queries.ended_session_auth())
