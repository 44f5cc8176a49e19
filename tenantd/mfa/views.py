"""MFA and passkey routes: enrolment, the second step of a sign-in, reauthentication.

The second step of a sign-in: POST /api/v1/auth/login (or the OpenID Connect callback) gave a
ticket and set the `mfa_binding` cookie; POST /api/v1/auth/mfa/verify with the ticket and one
factor sets the session cookies.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.identity.browser import client_meta, set_signed_in_cookies
from tenantd.identity.cookies import (
    clear_cookie,
    set_access_cookie,
)
from tenantd.identity.sessions import ClientMeta
from tenantd.mfa import passkeys, proof, service
from tenantd.mfa.domain import mfa_of
from tenantd.mfa.schemas import (
    CodeBody,
    CredentialBody,
    MfaSignedIn,
    PasskeyOut,
    PasskeyRegistered,
    ReauthBody,
    ReauthOut,
    RecoveryCodesOut,
    RegisterPasskeyBody,
    RenameBody,
    SignedInUserOut,
    TicketBody,
    TotpSetupOut,
    VerifyBody,
)
from tenantd.principal import current_principal
from tenantd.web.json import ok
from tenantd.web.ratelimit import rate_limit_request
from tenantd.web.routing import path_uuid
from tenantd.web.schemas import Empty
from tenantd.web.spec import Access, Routes

ROUTES = Routes("mfa")

# The abuse-limit scope of passwordless passkey options, apart from "mfa": every /login load
# fetches a set (conditional UI), and an office's page loads must not use up its address's
# second-step attempts. Unlisted in ops.config, so the default limit of such scopes.
PASSKEY_OPTIONS = "passkey_sign_in_options"

# The refusal of a step-up route to a session whose sign-in is not recent.
STEP_UP = {403: "REAUTH_REQUIRED"}
# Removing a factor: a step-up first, an empty answer.
REMOVE_FACTOR: dict[str, Any] = {"response": Empty, "responses": STEP_UP}
# The last step of a sign-in (the second factor, or a passkey alone): anyone may call it under
# the second step's abuse limit; it answers with the user and sets the session cookies.
FINISH_SIGN_IN: dict[str, Any] = {
    "access": Access.PUBLIC,
    "response": MfaSignedIn,
    "rate_limit": "mfa",
}


def _client(request: web.Request) -> ClientMeta:
    return client_meta(request, ip=request.remote)


# -- TOTP and recovery codes ------------------------------------------------------------------


@ROUTES.post(
    "/api/v1/auth/mfa/totp/setup",
    mfa_exempt=True,
    responses={**STEP_UP, 409: "An authenticator app is already set up"},
    summary="Start TOTP enrolment: a secret, its otpauth URI and QR code (pending until confirmed)",
)
async def totp_setup(request: web.Request) -> TotpSetupOut:
    setup = await service.setup_totp(mfa_of(request.app), current_principal(request))
    return TotpSetupOut(secret=setup.secret, otpauth_uri=setup.otpauth_uri, qr_svg=setup.qr_svg)


@ROUTES.post(
    "/api/v1/auth/mfa/totp/confirm",
    mfa_exempt=True,
    responses={
        401: "INVALID_CREDENTIALS: wrong code",
        **STEP_UP,
        429: "RATE_LIMITED: codes locked",
    },
    summary="Enable TOTP with a current code; the first factor brings 10 recovery codes",
)
async def totp_confirm(request: web.Request, body: CodeBody) -> RecoveryCodesOut:
    codes = await service.confirm_totp(
        mfa_of(request.app), current_principal(request), code=body.code
    )
    return RecoveryCodesOut(recovery_codes=codes)


@ROUTES.delete(
    "/api/v1/auth/mfa/totp", **REMOVE_FACTOR, summary="Remove the authenticator app (step-up)"
)
async def totp_delete(request: web.Request) -> Empty:
    await service.disable_totp(mfa_of(request.app), current_principal(request))
    return Empty()


@ROUTES.post(
    "/api/v1/auth/mfa/recovery-codes/regenerate",
    responses={**STEP_UP, 409: "No second factor"},
    summary="Ten new recovery codes; the old ones stop working (step-up)",
)
async def recovery_regenerate(request: web.Request) -> RecoveryCodesOut:
    codes = await service.regenerate_recovery_codes(mfa_of(request.app), current_principal(request))
    return RecoveryCodesOut(recovery_codes=codes)


# -- the second step of a sign-in -------------------------------------------------------------


def mfa_signed_in(request: web.Request, completed: service.Completed) -> web.Response:
    services = mfa_of(request.app)
    response = ok(
        MfaSignedIn(user=SignedInUserOut.of(completed.user), return_to=completed.return_to)
    )
    set_signed_in_cookies(response, services.settings, completed.tokens, completed.device)
    clear_cookie(response, services.settings, service.BINDING_COOKIE)
    return response


@ROUTES.post(
    "/api/v1/auth/mfa/verify",
    **FINISH_SIGN_IN,
    responses={
        401: "INVALID_CREDENTIALS (wrong code) or UNAUTHORIZED invalid_ticket",
        429: "RATE_LIMITED: 5 wrong codes in 15 minutes lock the codes for 15 minutes",
    },
    summary="Finish a sign-in with a second factor: sets the session cookies",
)
async def mfa_verify(request: web.Request, body: VerifyBody) -> web.Response:
    binding = request.cookies.get(service.BINDING_COOKIE)
    completed = await proof.second_factor(
        mfa_of(request.app), body, binding=binding, client=_client(request)
    )
    return mfa_signed_in(request, completed)


# -- reauthentication -------------------------------------------------------------------------


@ROUTES.post(
    "/api/v1/auth/reauth",
    mfa_exempt=True,
    response=ReauthOut,
    rate_limit="mfa",
    responses={401: "INVALID_CREDENTIALS", 429: "RATE_LIMITED"},
    summary="Prove it is you again (password, TOTP or passkey): a new access token whose"
    " auth_time is now",
)
async def reauth(request: web.Request, body: ReauthBody) -> web.Response:
    services = mfa_of(request.app)
    principal = current_principal(request)
    done = await proof.step_up(services, principal, body, device=_client(request).device)
    assert done.claims.auth_time is not None
    response = ok(ReauthOut(auth_time=int(done.claims.auth_time), amr=list(done.claims.amr)))
    set_access_cookie(response, services.settings, done.access_token, done.claims)
    return response


@ROUTES.post(
    "/api/v1/auth/reauth/passkey-options",
    mfa_exempt=True,
    response=dict[str, Any],
    summary="WebAuthn request options for reauthenticating with a passkey",
)
async def reauth_options(request: web.Request) -> dict[str, Any]:
    return await passkeys.authentication_options(
        mfa_of(request.app),
        purpose=passkeys.REAUTH,
        user_id=current_principal(request).user_id,
    )


# -- passkeys ---------------------------------------------------------------------------------


def _passkey_out(row: Any) -> PasskeyOut:
    return PasskeyOut.of(row, passkeys.aaguid_name(row["aaguid"]))


@ROUTES.post(
    "/api/v1/auth/passkeys/register/options",
    mfa_exempt=True,
    response=dict[str, Any],
    responses=STEP_UP,
    summary="WebAuthn creation options for a new passkey (discoverable; step-up)",
)
async def passkey_register_options(request: web.Request) -> dict[str, Any]:
    return await passkeys.registration_options(mfa_of(request.app), current_principal(request))


@ROUTES.post(
    "/api/v1/auth/passkeys/register/verify",
    mfa_exempt=True,
    response=PasskeyRegistered,
    status=201,
    responses={
        401: "INVALID_CREDENTIALS: the attestation does not verify",
        **STEP_UP,
    },
    summary="Keep a new passkey (the first factor brings 10 recovery codes)",
)
async def passkey_register_verify(request: web.Request, body: RegisterPasskeyBody) -> web.Response:
    done = await passkeys.register(
        mfa_of(request.app),
        current_principal(request),
        credential=body.credential,
        name=body.name,
    )
    data = PasskeyRegistered(passkey=_passkey_out(done.passkey), recovery_codes=done.recovery_codes)
    return ok(data, status=201)


@ROUTES.get("/api/v1/auth/passkeys", summary="My passkeys")
async def passkey_list(request: web.Request) -> list[PasskeyOut]:
    rows = await passkeys.list_passkeys(mfa_of(request.app), current_principal(request).user_id)
    return [_passkey_out(row) for row in rows]


@ROUTES.patch("/api/v1/auth/passkeys/{id}", summary="Rename a passkey")
async def passkey_rename(request: web.Request, body: RenameBody) -> PasskeyOut:
    row = await passkeys.rename(
        mfa_of(request.app),
        current_principal(request).user_id,
        path_uuid(request, "id"),
        body.name,
    )
    return _passkey_out(row)


@ROUTES.delete("/api/v1/auth/passkeys/{id}", **REMOVE_FACTOR, summary="Remove a passkey (step-up)")
async def passkey_delete(request: web.Request) -> Empty:
    await passkeys.delete(mfa_of(request.app), current_principal(request), path_uuid(request, "id"))
    return Empty()


@ROUTES.post(
    "/api/v1/auth/passkeys/authenticate/options",
    access=Access.PUBLIC,
    response=dict[str, Any],
    responses={429: "RATE_LIMITED"},
    summary="WebAuthn request options: with a ticket, the second factor of that sign-in;"
    " without, passwordless sign-in (discoverable passkeys)",
)
async def passkey_authenticate_options(request: web.Request, body: TicketBody) -> dict[str, Any]:
    # Passwordless options are limited apart from a sign-in's second step (PASSKEY_OPTIONS).
    await rate_limit_request(request, PASSKEY_OPTIONS if body.ticket is None else "mfa", body)
    return await proof.passkey_options(
        mfa_of(request.app),
        ticket=body.ticket,
        binding=request.cookies.get(service.BINDING_COOKIE),
    )


@ROUTES.post(
    "/api/v1/auth/passkeys/authenticate/verify",
    **FINISH_SIGN_IN,
    responses={401: "INVALID_CREDENTIALS: the assertion does not verify"},
    summary="Passwordless sign-in with a passkey: sets the session cookies (amr hwk)",
)
async def passkey_sign_in(request: web.Request, body: CredentialBody) -> web.Response:
    completed = await passkeys.sign_in(
        mfa_of(request.app), body.credential, client=_client(request)
    )
    return mfa_signed_in(request, completed)
