"""Sweeps of single sign-on: SAML requests never answered and used assertions past their
NotOnOrAfter (a replay of one is refused by its own time window from then on)."""

from __future__ import annotations

from sqlalchemy import func

from tenantd.db.tables import sso_saml_assertions, sso_saml_requests
from tenantd.ops.sweeps import SweepContext, delete_batches, sweep


@sweep("sso", "Delete expired SAML requests and remembered assertions")
async def sso_sweep(ctx: SweepContext) -> None:
    """Hourly; deleting a row twice or late changes nothing (both are read only while live)."""
    await delete_batches(ctx, sso_saml_requests, sso_saml_requests.c.expires_at < func.now())
    await delete_batches(ctx, sso_saml_assertions, sso_saml_assertions.c.expires_at < func.now())


SWEEPS = (sso_sweep,)
