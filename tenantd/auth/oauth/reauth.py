"""Step-up through the provider, for users who signed in with OpenID Connect (and maybe have
no password or factor): GET /api/v1/auth/oauth/{provider}/reauth sends them to the provider
with `prompt=login` and `max_age=0`; the callback then refreshes the auth_time of the session
that asked (like POST /api/v1/auth/reauth) instead of starting a new one.

The provider's answer counts only for the identity linked to that session's user, only when
its `auth_time` (when present) is not older than the request, and only while that session
lives; otherwise a named refusal and nothing changes.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tenantd.auth.domain import Auth
from tenantd.auth.oauth import errors, queries
from tenantd.auth.oauth.errors import OAuthRefused
from tenantd.auth.oauth.flow import CLOCK_SKEW_SECONDS, FlowState, VerifiedIdentity
from tenantd.mfa import service as mfa

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SteppedUp(mfa.Reauthenticated):
    """The session's new access token, and where the step-up goes back to."""

    return_to: str


async def step_up(
    services: Auth, *, provider: str, flow: FlowState, identity: VerifiedIdentity
) -> SteppedUp:
    binding = flow.reauth
    assert binding is not None
    if identity.auth_time is not None and identity.auth_time < flow.issued_at - CLOCK_SKEW_SECONDS:
        raise OAuthRefused(errors.REAUTH_STALE, "id_token auth_time predates the step-up")
    async with services.db.connection() as conn:
        target = await queries.reauth_target(
            conn,
            provider=provider,
            subject=identity.subject,
            family_id=binding.session_id,
            user_id=binding.user_id,
        )
    if target["identity_user_id"] != binding.user_id:
        raise OAuthRefused(
            errors.REAUTH_MISMATCH, "the provider vouched for another identity than the linked one"
        )
    if not target["session_live"]:
        raise OAuthRefused(errors.REAUTH_SESSION, "the session that asked has ended")
    done = await mfa.reauthenticated_session(
        services.identity,
        user_id=binding.user_id,
        account_id=target["account_id"],
        session_id=binding.session_id,
        method=mfa.AMR_FEDERATED,
    )
    log.info("oauth step-up", extra={"oauth": {"provider": provider}})
    return SteppedUp(
        access_token=done.access_token, claims=done.claims, return_to=flow.return_to or "/"
    )
