"""Sweep of the admin portal: links and portal sessions that can no longer open anything
(the audit log keeps their creation, opening and what was changed through them)."""

from __future__ import annotations

from tenantd.ops.sweeps import SweepContext, delete_batches, sweep
from tenantd.portal import queries


@sweep("admin_portal", "Delete expired admin portal links and ended portal sessions")
async def admin_portal_sweep(ctx: SweepContext) -> None:
    """Hourly; a row is read only while its link or session is live, so late is harmless."""
    await delete_batches(ctx, *queries.dead_links())


SWEEPS = (admin_portal_sweep,)
