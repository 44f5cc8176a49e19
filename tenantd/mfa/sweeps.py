"""The MFA sweep: sign-in tickets, WebAuthn challenges and "This wasn't me" links past their
life, and (identity's part, `identity.sweeps.ended_session_auth`) the sign-in record (amr,
auth_time) of session families that no longer have a session row."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func

from tenantd.db.tables import mfa_tickets, security_undo, webauthn_challenges
from tenantd.identity.sweeps import ended_session_auth
from tenantd.ops.sweeps import SweepContext, delete_batches, sweep


@sweep(
    "mfa",
    "Expired MFA tickets, WebAuthn challenges and undo links, sign-in records of ended sessions",
)
async def mfa_sweep(ctx: SweepContext) -> None:
    """Delete expired or orphaned MFA rows in bounded batches (idempotent)."""
    now = func.now()
    await delete_batches(ctx, mfa_tickets, mfa_tickets.c.expires_at < now - timedelta(hours=1))
    await delete_batches(ctx, webauthn_challenges, webauthn_challenges.c.expires_at < now)
    # "This wasn't me" links past their 7 days (kept a day longer for the support desk).
    await delete_batches(ctx, security_undo, security_undo.c.expires_at < now - timedelta(days=1))
    await ended_session_auth(ctx)


SWEEPS = (mfa_sweep,)
