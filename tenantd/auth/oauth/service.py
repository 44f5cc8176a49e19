"""Sign-in with an OpenID Connect provider: the rules of start, callback and unlink.

Callback order: state cookie and `state` (constant time), single use of the state, provider
error, code exchange, ID token (RS256/ES256 via JWKS, issuer, audience, expiry, nonce), the
UserInfo claims when the ID token lacks email ones (same `sub` required), then email_verified.
Only then one transaction: find the identity, else link the user with that address, else create
a verified user; provision the account; issue the session. An unverified email writes nothing at
all.
"""

from __future__ import annotations

import datetime as dt
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg2.errors

from tenantd.accounts import mail as account_mail
from tenantd.accounts.provisioning import DomainConflict, provision_personal_account
from tenantd.addresses import InvalidEmail, canonical_email
from tenantd.audit import security
from tenantd.auth.domain import Auth
from tenantd.auth.oauth import errors, presets, queries
from tenantd.auth.oauth.client import OidcClient
from tenantd.auth.oauth.discovery import ProviderMetadata
from tenantd.auth.oauth.errors import OAuthRefused, ProviderError, TokenRefused
from tenantd.auth.oauth.flow import (
    STATE_COOKIE,
    STATE_TTL_SECONDS,
    FlowState,
    ReauthBinding,
    TokenAnswer,
    VerifiedIdentity,
    authorization_url,
    callback_path,
    check_state,
    decode_state,
    encode_state,
    merge_userinfo,
    new_flow_state,
    read_header,
    redirect_uri,
    require_email,
    verify_id_token,
)
from tenantd.auth.oauth.reauth import SteppedUp, step_up
from tenantd.auth.service import ticket_or_session
from tenantd.db import Database
from tenantd.errors import Conflict, NotFound
from tenantd.identity import queries as auth_queries
from tenantd.identity import queries as identity_queries
from tenantd.identity import stepup
from tenantd.identity.events import user_changed
from tenantd.identity.sessions import ClientMeta, IssuedTokens
from tenantd.identity.settings import OAuthProviderSettings, SignInSettings
from tenantd.identity.signin import ProviderRedirect, Started, record_security
from tenantd.mfa import service as mfa
from tenantd.settings import Settings
from tenantd.web.schemas import ApiModel

if TYPE_CHECKING:
    from tenantd.bundle import Services
    from tenantd.principal import Principal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CallbackParams:
    code: str | None = None
    state: str | None = None
    error: str | None = None
    iss: str | None = None
    user: str | None = None  # Apple's form_post: the user's name, first sign-in only (JSON)
    posted: bool = False  # arrived as a POST form (response_mode=form_post)

    @classmethod
    def of_form(cls, form: Mapping[str, str]) -> CallbackParams:
        """The parameters a provider posted (response_mode=form_post)."""
        return cls(
            code=form.get("code"),
            state=form.get("state"),
            error=form.get("error"),
            iss=form.get("iss"),
            user=form.get("user"),
            posted=True,
        )


class CallbackQuery(ApiModel):
    """A provider's redirect to the callback (the query of a GET)."""

    code: str | None = None
    state: str | None = None
    error: str | None = None
    iss: str | None = None

    def params(self) -> CallbackParams:
        return CallbackParams(code=self.code, state=self.state, error=self.error, iss=self.iss)


@dataclass(frozen=True)
class SignedIn:
    tokens: IssuedTokens | None  # None: the user has a second factor, see `ticket`
    return_to: str
    user_id: uuid.UUID
    outcome: str  # returning | linked | created
    ticket: mfa.Ticket | None = None
    device: str | None = None  # the browser's device cookie value (the view sets it)


def provider_settings(settings: Settings, name: str) -> OAuthProviderSettings:
    """The configured provider of that name; anything else is not found."""
    for provider in settings.section(SignInSettings).oauth_providers:
        if provider.name == name:
            return provider
    raise NotFound("Unknown sign-in provider")


async def reauth_binding(
    services: Services, principal: Principal, *, provider: str
) -> ReauthBinding:
    """A step-up through `provider` (prompt=login): a known provider, an identity of it linked
    to the caller, and a session to refresh."""
    provider_settings(services.settings, provider)  # unknown: 404
    if principal.session_id is None:
        raise Conflict("This token belongs to no session: sign in again")
    async with services.db.connection() as conn:
        linked = await stepup.reauth_providers(conn, services.settings, principal.user_id)
    if provider not in linked:
        raise NotFound("No identity of this provider is linked")
    return ReauthBinding(user_id=principal.user_id, session_id=principal.session_id)


def configured_providers(settings: Settings) -> list[dict[str, str]]:
    """Names and start paths of the configured providers (for a login page)."""
    return [
        {"name": p.name, "startUrl": f"/api/v1/auth/oauth/{p.name}/start"}
        for p in settings.section(SignInSettings).oauth_providers
    ]


async def _metadata(oidc: OidcClient, provider: OAuthProviderSettings) -> ProviderMetadata:
    try:
        return await oidc.metadata(provider)
    except ProviderError as exc:
        log.error("oauth provider %s unusable: %s", provider.name, exc)
        raise OAuthRefused(errors.UNAVAILABLE, "provider metadata unavailable") from None


async def start(
    oidc: OidcClient,
    settings: Settings,
    *,
    provider: str,
    return_to: str | None,
    reauth: ReauthBinding | None = None,
) -> ProviderRedirect:
    """Begin the code flow: fresh state, nonce and PKCE verifier, kept in a signed cookie
    (with `reauth`, a step-up of that session: see reauth.py)."""
    config = provider_settings(settings, provider)
    if reauth is not None and not presets.is_openid(config):
        # GitHub has no prompt=login nor auth_time: it cannot prove a fresh sign-in.
        raise NotFound("This provider cannot confirm a recent sign-in")
    metadata = await _metadata(oidc, config)
    flow = new_flow_state(config.name, return_to, reauth=reauth)
    return ProviderRedirect(
        location=authorization_url(
            metadata,
            config,
            flow,
            callback=redirect_uri(settings, config.name),
            scopes=presets.scopes(config),
            openid=presets.is_openid(config),
            response_mode=presets.response_mode(config),
        ),
        cookie=STATE_COOKIE,
        value=encode_state(settings.secret_key, flow),
        path=callback_path(settings, config.name),
        max_age=STATE_TTL_SECONDS,
        same_site=presets.state_same_site(config),  # None: Apple's callback is a form POST
    )


async def complete(
    services: Auth,
    oidc: OidcClient,
    *,
    provider: str,
    params: CallbackParams,
    state_cookie: str | None,
    client: ClientMeta,
) -> SignedIn | SteppedUp:
    """Finish the code flow and sign in (or, for a step-up flow, refresh the asking session's
    auth_time); every refusal is an OAuthRefused, nothing written."""
    settings = services.settings
    config = provider_settings(settings, provider)
    flow = decode_state(settings.secret_key, state_cookie, provider=config.name)
    check_state(flow, params.state)
    if params.posted != (presets.response_mode(config) == "form_post"):
        raise OAuthRefused(errors.STATE_INVALID, "callback arrived by the wrong method")
    metadata, tokens = await _exchange(
        services.db,
        oidc,
        config,
        flow=flow,
        params=params,
        callback=redirect_uri(settings, config.name),
    )
    if tokens.id_token is None:
        identity = await _github_identity(oidc, metadata, tokens)
    else:
        identity = await _id_token_identity(oidc, config, metadata, tokens.id_token, flow)
        if flow.reauth is not None:
            return await step_up(services, provider=config.name, flow=flow, identity=identity)
        identity = await _with_userinfo(oidc, metadata, identity, tokens)
        identity = presets.with_names(presets.vouch(config, identity), params.user)
    try:
        # The API's normal form exactly, so an IdP's `Alice@Exämple.com.` is the same user
        # (and the same domain claim) as a registered `alice@xn--exmple-cua.com`.
        email = canonical_email(require_email(identity))
    except InvalidEmail:
        raise OAuthRefused(errors.EMAIL_MISSING, "id_token email is not a valid address") from None
    if not identity.email_verified:
        # Nothing is written: no user, identity, account or session.
        raise OAuthRefused(errors.EMAIL_NOT_VERIFIED, "provider does not vouch for the email")
    return await _retry_raced_sign_up(
        lambda: _sign_in(
            services,
            provider=config.name,
            subject=identity.subject,
            email=email,
            names=(identity.given_name, identity.family_name),
            return_to=flow.return_to or "/",
            client=client,
        )
    )


async def identify(
    services: Services,
    oidc: OidcClient,
    config: OAuthProviderSettings,
    *,
    flow: FlowState,
    params: CallbackParams,
    callback: str,
) -> VerifiedIdentity:
    """The code flow's callback for an OpenID Connect provider that is not a configured social
    one (an account's SSO connection): `state` checked and used once, provider error, code
    exchange, ID token, UserInfo, exactly as `complete` does; every refusal an OAuthRefused."""
    check_state(flow, params.state)
    metadata, tokens = await _exchange(
        services.db, oidc, config, flow=flow, params=params, callback=callback
    )
    if tokens.id_token is None:
        raise OAuthRefused(errors.FAILED, "token answer carries no id_token")
    identity = await _id_token_identity(oidc, config, metadata, tokens.id_token, flow)
    return await _with_userinfo(oidc, metadata, identity, tokens)


async def _exchange(
    db: Database,
    oidc: OidcClient,
    config: OAuthProviderSettings,
    *,
    flow: FlowState,
    params: CallbackParams,
    callback: str,
) -> tuple[ProviderMetadata, TokenAnswer]:
    """The callback's common steps once `state` is checked: single use of the state, provider
    error, the provider's `iss` (RFC 9207), code exchange; every refusal an OAuthRefused."""
    await _consume(db, flow)
    if params.error is not None:
        error = params.error if errors.PROVIDER_ERROR_CODE.match(params.error) else "(unreadable)"
        raise OAuthRefused(errors.DENIED, f"provider answered error {error}")
    if not params.code:
        raise OAuthRefused(errors.FAILED, "callback carries no code")
    metadata = await _metadata(oidc, config)
    # RFC 9207: a provider that names itself in the callback must be the one we asked.
    if (params.iss is not None or metadata.iss_parameter_supported) and (
        params.iss != metadata.issuer
    ):
        raise OAuthRefused(errors.FAILED, "callback iss does not name the provider")
    try:
        tokens = await oidc.exchange_code(
            config,
            metadata,
            code=params.code,
            code_verifier=flow.code_verifier,
            redirect_uri=callback,
        )
    except TokenRefused as exc:
        raise OAuthRefused(errors.FAILED, str(exc)) from None
    except ProviderError as exc:
        raise OAuthRefused(errors.UNAVAILABLE, str(exc)) from None
    return metadata, tokens


async def authorization(
    oidc: OidcClient, config: OAuthProviderSettings, flow: FlowState, *, callback: str
) -> str:
    """The provider's authorization URL for a new flow (an SSO connection's start)."""
    metadata = await _metadata(oidc, config)
    return authorization_url(metadata, config, flow, callback=callback)


async def _id_token_identity(
    oidc: OidcClient,
    config: OAuthProviderSettings,
    metadata: ProviderMetadata,
    id_token: str,
    flow: FlowState,
) -> VerifiedIdentity:
    """Signature (JWKS), issuer, audience, expiry, iat and nonce of the ID token."""
    header = read_header(id_token)
    try:
        key = await oidc.signing_key(metadata, kid=header.kid, algorithm=header.algorithm)
    except ProviderError as exc:
        raise OAuthRefused(errors.UNAVAILABLE, str(exc)) from None
    if key is None:
        raise OAuthRefused(errors.FAILED, "id_token signed by a key the provider does not publish")
    return verify_id_token(
        id_token,
        key.key,
        algorithm=header.algorithm,
        issuer=presets.id_token_issuers(config, metadata, id_token),
        client_id=config.client_id,
        nonce=flow.nonce,
    )


async def _github_identity(
    oidc: OidcClient, metadata: ProviderMetadata, tokens: TokenAnswer
) -> VerifiedIdentity:
    """Plain OAuth 2.0 (GitHub): the user and its primary address from the REST API."""
    assert tokens.access_token is not None  # token_answer requires one without an ID token
    try:
        user, emails = await oidc.github_user(metadata, access_token=tokens.access_token)
        return presets.github_identity(user, emails)
    except ProviderError as exc:
        raise OAuthRefused(errors.UNAVAILABLE, str(exc)) from None


async def _with_userinfo(
    oidc: OidcClient,
    metadata: ProviderMetadata,
    identity: VerifiedIdentity,
    tokens: TokenAnswer,
) -> VerifiedIdentity:
    """OIDC Core 5.4: a provider may give email claims only from UserInfo (oidc-provider does
    when it issues an access token); fetch them when the ID token lacks them."""
    if identity.has_email_claims or tokens.access_token is None:
        return identity
    if metadata.userinfo_endpoint is None:
        return identity
    try:
        claims = await oidc.userinfo(metadata, access_token=tokens.access_token)
    except ProviderError as exc:
        raise OAuthRefused(errors.UNAVAILABLE, str(exc)) from None
    return merge_userinfo(identity, claims)


async def _consume(db: Database, flow: FlowState) -> None:
    try:
        jti = uuid.UUID(flow.jti)
    except ValueError:
        raise OAuthRefused(errors.STATE_INVALID, "state cookie invalid") from None
    expires_at = dt.datetime.fromtimestamp(flow.expires_at, dt.UTC)
    async with db.connection() as conn:
        if not await queries.consume_state(conn, jti=jti, expires_at=expires_at):
            raise OAuthRefused(errors.STATE_INVALID, "state already used (replayed callback)")


async def _retry_raced_sign_up(sign_in: Callable[[], Awaitable[SignedIn]]) -> SignedIn:
    for attempt in (1, 2):
        try:
            return await sign_in()
        except psycopg2.errors.UniqueViolation:
            # A password sign-up took the address between our read and our insert: the
            # second attempt sees that user and links it.
            if attempt == 2:
                raise
            log.info("oauth sign-in raced a sign-up; retrying once")
    raise AssertionError("unreachable")


async def _sign_in(
    services: Auth,
    *,
    provider: str,
    subject: str,
    email: str,
    names: tuple[str, str],
    return_to: str,
    client: ClientMeta,
) -> SignedIn:
    settings = services.settings
    conflict: DomainConflict | None = None
    started: Started | None = None
    ticket: mfa.Ticket | None = None
    async with services.db.transaction() as conn:
        await queries.lock_sign_in(conn, provider=provider, subject=subject, email=email)
        found = await queries.sign_in_lookup(conn, provider=provider, subject=subject, email=email)
        if found["identity_user_id"] is not None:
            user_id: uuid.UUID = found["identity_user_id"]
            outcome = "returning"
            await queries.refresh_identity_email(
                conn, provider=provider, subject=subject, email=email
            )
        elif found["email_user_id"] is not None:
            if found["email_user_has_provider"]:
                raise OAuthRefused(
                    errors.IDENTITY_CONFLICT,
                    "the user with this email links another identity at this provider",
                )
            user_id = found["email_user_id"]
            outcome = "linked"
            if found["email_verified_at"] is None and await identity_queries.claim_unverified_user(
                conn, user_id
            ):
                await user_changed(
                    conn, "user.email_verified", user_id, previous={"emailVerified": False}
                )
            await queries.insert_identity(
                conn, user_id=user_id, provider=provider, subject=subject, email=email
            )
        else:
            outcome = "created"
            user_id = await identity_queries.insert_verified_user(
                conn, email=email, first_name=names[0], last_name=names[1]
            )
            await user_changed(conn, "user.created", user_id)
            await queries.insert_identity(
                conn, user_id=user_id, provider=provider, subject=subject, email=email
            )
        if outcome != "returning":
            await record_security(
                conn,
                client,
                user_id=user_id,
                kind=security.OAUTH_LINKED,
                data={"provider": provider, "newUser": outcome == "created"},
            )
        provisioned = await provision_personal_account(conn, settings, user_id=user_id)
        if provisioned.conflict is not None:
            # Commit the user, identity and join request; no session (no account to enter).
            conflict = provisioned.conflict
            if outcome != "returning":
                # The owner and the requester are mailed after commit, with the join request.
                await account_mail.submit_join_request(
                    services, conn, join_request_id=conflict.join_request_id
                )
        else:
            # The provider was the first factor; a second is asked on the MFA page.
            proven = await ticket_or_session(
                services,
                conn,
                user_id=user_id,
                account_id=provisioned.account_id,
                client=client,
                method=provider,
                amr=mfa.AMR_FEDERATED,
                return_to=return_to,
            )
            if isinstance(proven, mfa.Ticket):
                ticket = proven
            else:
                started = proven
    _log_outcome(provider, user_id, outcome if conflict is None else "domain_claimed")
    if conflict is not None:
        # Committed above: the join request and its mail jobs survive the refusal.
        raise OAuthRefused(
            errors.DOMAIN_CLAIMED,
            "domain claimed by another account; join request pending",
            params={"domain": conflict.domain, "accountId": str(conflict.account_id)},
        )
    return SignedIn(
        tokens=started.tokens if started is not None else None,
        return_to=return_to,
        user_id=user_id,
        outcome=outcome,
        ticket=ticket,
        device=started.device if started is not None else None,
    )


def _log_outcome(provider: str, user_id: uuid.UUID, outcome: str) -> None:
    fields: dict[str, Any] = {"provider": provider, "user_id": str(user_id), "outcome": outcome}
    log.info("oauth sign-in %s", outcome, extra={"oauth": fields})


async def unlink(
    db: Database, *, user_id: uuid.UUID, provider: str, client: ClientMeta | None = None
) -> None:
    """Remove the caller's identity at a provider while another way to sign in remains."""
    async with db.transaction() as conn:
        # The user row lock makes two concurrent unlinks see each other's deletion.
        await auth_queries.lock_user(conn, user_id)
        result = await queries.unlink_identity(conn, user_id=user_id, provider=provider)
        if result["removed"]:
            await record_security(
                conn,
                client,
                user_id=user_id,
                kind=security.OAUTH_UNLINKED,
                data={"provider": provider},
            )
    if not result["found"]:
        raise NotFound("No identity of this provider is linked")
    if not result["removed"]:
        raise Conflict(
            "This provider is your only way to sign in: set a password or link another "
            "provider first"
        )
    log.info("oauth identity unlinked", extra={"oauth": {"provider": provider}})
