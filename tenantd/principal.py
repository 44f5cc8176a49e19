"""The authenticated caller of a request (as the guard resolved it) and its access claims."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, fields

from aiohttp import web


@dataclass(frozen=True, slots=True)
class AccessClaims:
    user_id: uuid.UUID
    account_id: uuid.UUID | None
    jti: uuid.UUID
    issued_at: float
    expires_at: float
    session_id: uuid.UUID | None = None  # the `sid` claim: the refresh session (family)
    amr: tuple[str, ...] = ()  # RFC 8176 methods of the sign-in (`pwd`, `otp`, `hwk`, ...)
    auth_time: float | None = None  # when the session last proved who it is (step-up)
    act: str | None = None  # the `act` claim's sub: the operator impersonating the user


@dataclass(frozen=True, slots=True)
class Principal:
    user_id: uuid.UUID
    account_id: uuid.UUID | None  # the token's aid claim: the only source of the active account
    role: str | None  # role in that account, resolved when the token was checked
    jti: uuid.UUID
    issued_at: float
    expires_at: float
    session_id: uuid.UUID | None = None  # the token's sid: logout of that session ends it
    amr: tuple[str, ...] = ()
    auth_time: float | None = None
    act: str | None = None  # set when an operator impersonates the user ("apikey:<id>")
    # The token's account requires MFA and this session used no second factor (amr): every
    # request but the few that step up, enrol a factor or leave the account is refused.
    owes_factor: bool = False
    # The permissions of a custom role (None for a system role: its set is fixed in code),
    # read with the role; `tenantd.identity.permissions` decides what they allow.
    role_permissions: tuple[str, ...] | None = None

    @property
    def claims(self) -> AccessClaims:
        """The access-token claims this principal was resolved from (for re-checks, revocation):
        its fields of the claims' names."""
        return AccessClaims(
            **{claim.name: getattr(self, claim.name) for claim in fields(AccessClaims)}
        )


class AnonymousNotHandled(RuntimeError):
    """A tryAuth view used the user without branching on anonymous (a server error)."""


def current_principal(request: web.Request) -> Principal:
    """The caller; on a tryAuth route an anonymous caller here is a bug, hence a 5xx."""
    principal: Principal | None = request.get(PRINCIPAL)
    if principal is None:
        raise AnonymousNotHandled("view used the user without handling the anonymous case")
    return principal


def optional_principal(request: web.Request) -> Principal | None:
    """For tryAuth views: None means anonymous."""
    return request.get(PRINCIPAL)


PRINCIPAL: web.RequestKey[Principal | None] = web.RequestKey("principal")
