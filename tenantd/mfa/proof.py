"""The proofs a person gives: a second factor that finishes a sign-in, one factor that steps
a session up, the passkey options either asks for. The JSON routes and the hosted pages call
these same functions, so the order of the checks is written once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tenantd.identity.sessions import ClientMeta
from tenantd.mfa import passkeys, service
from tenantd.mfa.schemas import ReauthBody, VerifyBody

if TYPE_CHECKING:
    from tenantd.mfa.domain import Mfa
    from tenantd.principal import Principal


async def second_factor(
    services: Mfa, body: VerifyBody, *, binding: str | None, client: ClientMeta
) -> service.Completed:
    """Finish a sign-in: its ticket live and bound to this browser, then one factor (a
    passkey, a TOTP code or a recovery code) of the ticket's user."""
    ticket = await service.live_ticket(services, ticket=body.ticket, binding=binding)
    if body.passkey is not None:
        await passkeys.verify_assertion(
            services,
            body.passkey,
            purpose=passkeys.SECOND_FACTOR,
            user_id=ticket["user_id"],
            ticket_id=ticket["id"],
        )
        method = service.AMR_PASSKEY
    else:
        method = await service.check_code(
            services, ticket["user_id"], totp_code=body.totp, recovery_code=body.recovery_code
        )
    return await service.complete_ticket(services, ticket, method=method, client=client)


async def step_up(
    services: Mfa, principal: Principal, body: ReauthBody, *, device: str | None
) -> service.Reauthenticated:
    """Prove it is you again with one factor (password, TOTP code or passkey): a new access
    token of the same session whose auth_time is now."""
    if body.password is not None:
        method = await service.check_password(
            services, principal.user_id, body.password, device=device
        )
    elif body.totp is not None:
        method = await service.check_code(services, principal.user_id, totp_code=body.totp)
    else:
        assert body.passkey is not None
        await passkeys.verify_assertion(
            services, body.passkey, purpose=passkeys.REAUTH, user_id=principal.user_id
        )
        method = service.AMR_PASSKEY
    return await service.reauthenticated(services, principal, method)


async def passkey_options(
    services: Mfa, *, ticket: str | None, binding: str | None
) -> dict[str, Any]:
    """WebAuthn request options: with a ticket, its sign-in's second factor (the ticket live
    and bound to this browser); without, a passwordless sign-in."""
    if ticket is None:
        return await passkeys.authentication_options(services, purpose=passkeys.SIGN_IN)
    row = await service.live_ticket(services, ticket=ticket, binding=binding)
    return await passkeys.authentication_options(
        services, purpose=passkeys.SECOND_FACTOR, user_id=row["user_id"], ticket_id=row["id"]
    )
