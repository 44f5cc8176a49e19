"""The MFA sweep: sign-in tickets and WebAuthn challenges past their life, and the sign-in
record (amr, auth_time) of session families that no longer have a session row."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import exists, func, select

from tenantd.db.tables import mfa_tickets, session_auth, sessions, webauthn_challenges
from tenantd.ops.sweeps import SweepContext, delete_batches, sweep


@sweep("mfa", "Expired MFA tickets and WebAuthn challenges, sign-in records of ended sessions")
async def mfa_sweep(ctx: SweepContext) -> None:
    """Delete expired or orphaned MFA rows in bounded batches (idempotent)."""
    now = func.now()
    await delete_batches(ctx, mfa_tickets, mfa_tickets.c.expires_at < now - timedelta(hours=1))
    await delete_batches(ctx, webauthn_challenges, webauthn_challenges.c.expires_at < now)
    family_alive = exists(
        select(sessions.c.id).where(sessions.c.family_id == session_auth.c.family_id)
    )
    await delete_batches(
        ctx,
        session_auth,
        (session_auth.c.created_at < now - timedelta(hours=1)) & ~family_alive,
    )


SWEEPS = (mfa_sweep,)
