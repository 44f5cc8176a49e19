"""The guard table of SERVICE.md: requireAuth (default) and tryAuth.

| situation          | requireAuth               | tryAuth                    |
| no cookie          | 401 missing_session       | view runs with user None   |
| invalid cookie     | 401 invalid_session       | 401 invalid_session        |
| valid cookie       | view runs                 | view runs                  |
"""

from __future__ import annotations

import time

from aiohttp import web

from tenantd.db import Conn
from tenantd.errors import Unauthorized
from tenantd.identity import queries
from tenantd.identity.cookies import AUTH_COOKIE
from tenantd.identity.domain import Identity, identity_of
from tenantd.identity.tokens import AccessClaims, decode_access_token
from tenantd.principal import PRINCIPAL, Principal
from tenantd.web.cookie_header import token_cookie
from tenantd.web.spec import Access


def invalid() -> Unauthorized:
    return Unauthorized("invalid_session", "Session is invalid or expired")


async def check_claims(conn: Conn, claims: AccessClaims) -> Principal:
    """Expiry, jti and session revocation, the user-wide cutoff and the aid membership."""
    principal, _, _ = await _checked(conn, claims)
    return principal


async def _checked(conn: Conn, claims: AccessClaims) -> tuple[Principal, float | None, bool]:
    """`check_claims`, with the user's cutoff it read (epoch seconds) and whether the token's
    account requires MFA, for the cache."""
    if claims.expires_at <= time.time():
        raise invalid()
    state = await queries.token_state(
        conn,
        user_id=claims.user_id,
        jti=claims.jti,
        account_id=claims.account_id,
        session_id=claims.session_id,
    )
    if state is None:
        raise invalid()  # the user is gone
    cutoff = state["tokens_valid_after"]
    at = cutoff.timestamp() if cutoff is not None else None
    require_mfa = bool(state["require_mfa"])
    custom = state["role_permissions"]
    principal = decide(
        claims,
        cutoff=at,
        revoked=state["revoked"],
        role=state["role"],
        require_mfa=require_mfa,
        role_permissions=tuple(custom) if custom is not None else None,
    )
    return principal, at, require_mfa


def decide(
    claims: AccessClaims,
    *,
    cutoff: float | None,
    revoked: bool,
    role: str | None,
    require_mfa: bool = False,
    role_permissions: tuple[str, ...] | None = None,
) -> Principal:
    """The principal of a token whose state is known (from the statement or the cache's
    mirror of it); `invalid()` when that state refuses it. `owes_factor` says the token's
    account requires MFA and the session used no factor (the caller refuses it, see
    `app.factory.guard`)."""
    if revoked:
        raise invalid()
    if cutoff is not None and claims.issued_at < cutoff:
        raise invalid()
    if claims.account_id is not None and role is None:
        raise invalid()  # membership revoked or account deleted since the token was issued
    return Principal(
        user_id=claims.user_id,
        account_id=claims.account_id,
        role=role,
        jti=claims.jti,
        issued_at=claims.issued_at,
        expires_at=claims.expires_at,
        session_id=claims.session_id,
        amr=claims.amr,
        auth_time=claims.auth_time,
        act=claims.act,
        owes_factor=require_mfa and not queries.used_factor(claims.amr),
        role_permissions=role_permissions,
    )


async def recheck(identity: Identity, claims: AccessClaims) -> Principal:
    """The principal of decoded claims, checked again: expiry, then the principal cache or
    `check_claims`. The guard and every SSE stream (before each message and on idle ticks)
    call this one function; it raises `invalid()` when the token no longer holds.

    The cache answers when it holds this token: it is invalidated by the same writes
    (logout, logout-all, membership changes) at once on this instance and within
    milliseconds on others, so a hot stream does not cost a query per message.

    A token the cache has not met yet is answered from memory too when its user's facts
    (cutoff, role in the token's account) are cached and the mirror of revocations is
    loaded (`PrincipalCache.token_state`): a new token of a known user (every refresh, every
    instance a user reaches) costs its signature verification and no statement (issue 19).
    """
    if claims.expires_at <= time.time():
        raise invalid()
    cache = identity.principal_cache
    cached = cache.principal(claims.jti)
    if cached is not None:
        return cached
    generation = cache.generation
    known = cache.token_state(claims.user_id, claims.account_id, claims.jti, claims.session_id)
    if known is not None:
        cutoff, revoked, role, require_mfa, custom = known
        principal = decide(
            claims,
            cutoff=cutoff,
            revoked=revoked,
            role=role,
            require_mfa=require_mfa,
            role_permissions=custom,
        )
        cache.store_principal(principal, generation)
        return principal
    async with identity.db.connection() as conn:
        principal, cutoff, require_mfa = await _checked(conn, claims)
    cache.store_facts(
        claims.user_id,
        cutoff,
        claims.account_id,
        principal.role,
        generation,
        require_mfa,
        principal.role_permissions,
    )
    cache.store_principal(principal, generation)
    return principal


async def authenticate(request: web.Request, token: str) -> Principal:
    """Verify the token; its checked context comes from the cache when it is there."""
    identity = identity_of(request.app)
    claims = decode_access_token(identity.keyring, token)
    return await recheck(identity, claims)


async def guard(request: web.Request, access: Access) -> None:
    if access in (Access.PUBLIC, Access.SIGNATURE):
        return
    if access is Access.API_KEY:
        # Server routes are the API-key guard's; a browser session never opens one.
        raise Unauthorized("missing_api_key", "An API key is required")
    token = token_cookie(request, AUTH_COOKIE)
    if not token:
        if access is Access.TRY:
            request[PRINCIPAL] = None
            return
        raise Unauthorized("missing_session", "Sign in first")
    request[PRINCIPAL] = await authenticate(request, token)
