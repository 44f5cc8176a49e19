"""The MFA sweep: sign-in tickets, WebAuthn challenges and "This wasn't me" links past their
life, and (identity's part, `identity.sweeps.ended_session_auth`) the sign-in record (amr,
auth_time) of session families that no longer have a session row."""

from __future__ import annotations

from tenantd.identity.sweeps import ended_session_auth
from tenantd.mfa import queries
from tenantd.ops.sweeps import SweepContext, delete_batches, sweep


@sweep(
    "mfa",
    "Expired MFA tickets, WebAuthn challenges and undo links, sign-in records of ended sessions",
)
async def mfa_sweep(ctx: SweepContext) -> None:
    """Delete expired or orphaned MFA rows in bounded batches (idempotent)."""
    for purge in queries.expired_rows():
        await delete_batches(ctx, *purge)
    await ended_session_auth(ctx)


SWEEPS = (mfa_sweep,)
