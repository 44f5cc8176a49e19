"""Sweeps of single sign-on: SAML requests never answered and used assertions past their
NotOnOrAfter (a replay of one is refused by its own time window from then on)."""

from __future__ import annotations

from tenantd.ops.sweeps import SweepContext, delete_batches, sweep
from tenantd.sso import queries


@sweep("sso", "Delete expired SAML requests and remembered assertions")
async def sso_sweep(ctx: SweepContext) -> None:
    """Hourly; deleting a row twice or late changes nothing (both are read only while live)."""
    for purge in queries.expired_saml_rows():
        await delete_batches(ctx, *purge)


SWEEPS = (sso_sweep,)
