"""Passkeys (WebAuthn, py_webauthn): registration, assertions for passwordless sign-in, for
the second factor of a sign-in ticket and for reauthentication.

Challenges are single use and live 5 minutes: the server keeps a keyed hash of each one with
its purpose (and user or ticket), and finds it again from the challenge the authenticator
signed (clientDataJSON), so the client carries no extra state.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import webauthn
from webauthn.helpers import bytes_to_base64url, parse_client_data_json
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.parse_authentication_credential_json import (
    parse_authentication_credential_json,
)
from webauthn.helpers.parse_registration_credential_json import (
    parse_registration_credential_json,
)
from webauthn.helpers.structs import (
    AuthenticationCredential,
    AuthenticatorSelectionCriteria,
    AuthenticatorTransport,
    PublicKeyCredentialDescriptor,
    RegistrationCredential,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from tenantd.db import Conn, Row
from tenantd.errors import AppError, Conflict, NotFound, Unauthorized, ValidationFailed
from tenantd.identity import queries as identity_queries
from tenantd.identity.errors import InvalidCredentials
from tenantd.identity.sessions import ClientMeta
from tenantd.identity.settings import IdentitySettings
from tenantd.identity.signin import start_default_session
from tenantd.identity.tokens import token_hash
from tenantd.mfa import queries, sensitive
from tenantd.mfa.service import AMR_PASSKEY, Completed, factor_added, remove_factor
from tenantd.settings import Settings

if TYPE_CHECKING:
    from tenantd.mfa.domain import Mfa
    from tenantd.principal import Principal

log = logging.getLogger(__name__)

REGISTER = "register"
SIGN_IN = "sign_in"  # passwordless, discoverable credentials
SECOND_FACTOR = "mfa"  # the second factor of a sign-in ticket
REAUTH = "reauth"
CHALLENGE_TTL_SECONDS = 300
TIMEOUT_MS = 120_000
MAX_PASSKEYS = 20

# Authenticator names by AAGUID (a few well-known ones; the FIDO metadata service has all).
AAGUID_NAMES = {
    "fbfc3007-154e-4ecc-8c0b-6e020557d7bd": "iCloud Keychain",
    "ea9b8d66-4d01-1d21-3ce4-b6b48cb575d4": "Google Password Manager",
    "adce0002-35bc-c60a-648b-0b25f1f05503": "Chrome on Mac",
    "08987058-cadc-4b81-b6e1-30de50dcbe96": "Windows Hello",
    "9ddd1817-af5a-4672-a2b9-3e3dd95000a9": "Windows Hello",
    "6028b017-b1d4-4c02-b4b3-afcdafc96bb2": "Windows Hello",
    "bada5566-a7aa-401f-bd96-45619a55120d": "1Password",
    "d548826e-79b4-db40-a3d8-11116f7e8349": "Bitwarden",
    "531126d6-e717-415c-9320-3d9aa6981239": "Dashlane",
    "cb69481e-8ff7-4039-93ec-0a2729a154a8": "YubiKey 5 Series",
    "ee882879-721c-4913-9775-3dfcce97072a": "YubiKey 5 Series",
    "01020304-0506-0708-0102-030405060708": "Chrome virtual authenticator",
}
NO_AAGUID = "00000000-0000-0000-0000-000000000000"


def aaguid_name(aaguid: str | None) -> str | None:
    return AAGUID_NAMES.get((aaguid or "").lower())


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _challenge_key(settings: Settings, challenge: bytes) -> bytes:
    return token_hash(settings.secret_key, "webauthn-challenge:" + bytes_to_base64url(challenge))


def _invalid(message: str = "The passkey could not be verified") -> AppError:
    return InvalidCredentials(message)


async def _remember(
    conn: Conn,
    settings: Settings,
    challenge: bytes,
    *,
    purpose: str,
    user_id: uuid.UUID | None = None,
    ticket_id: uuid.UUID | None = None,
) -> None:
    await queries.insert_challenge(
        conn,
        challenge_hash=_challenge_key(settings, challenge),
        purpose=purpose,
        user_id=user_id,
        ticket_id=ticket_id,
        expires_at=_now() + dt.timedelta(seconds=CHALLENGE_TTL_SECONDS),
    )


def _signed_challenge(client_data_json: bytes) -> bytes:
    try:
        return parse_client_data_json(client_data_json).challenge
    except (WebAuthnException, ValueError, KeyError, TypeError):
        raise _invalid() from None


CredentialT = TypeVar("CredentialT", RegistrationCredential, AuthenticationCredential)


VerifiedT = TypeVar("VerifiedT")


@dataclass(frozen=True)
class _Response(Generic[CredentialT, VerifiedT]):
    """A kind of browser response: how it parses (the field and words of its 422 when it
    does not), how it is verified, and what the log calls it when it is refused."""

    parse: Callable[[dict[str, Any]], CredentialT]
    field: str
    what: str
    verify: Callable[..., VerifiedT]
    label: str


_REGISTRATION = _Response(
    parse_registration_credential_json,
    "credential",
    "not a WebAuthn registration response",
    webauthn.verify_registration_response,
    "passkey registration",
)
_ASSERTION = _Response(
    parse_authentication_credential_json,
    "passkey",
    "not a WebAuthn authentication response",
    webauthn.verify_authentication_response,
    "passkey assertion",
)


async def _received(
    services: Mfa,
    kind: _Response[CredentialT, Any],
    credential: dict[str, Any],
    *,
    purpose: str,
) -> tuple[CredentialT, bytes, Row]:
    """The browser's credential parsed (or 422 on the kind's field), and the challenge it
    signed, spent (see `_spend`), with its row."""
    try:
        parsed = kind.parse(credential)
    except (WebAuthnException, ValueError, KeyError, TypeError):
        raise ValidationFailed({kind.field: kind.what}) from None
    challenge = _signed_challenge(parsed.response.client_data_json)
    return parsed, challenge, await _spend(services, challenge, purpose=purpose)


def _verified(
    settings: Settings,
    kind: _Response[CredentialT, VerifiedT],
    parsed: CredentialT,
    challenge: bytes,
    **checks: Any,
) -> VerifiedT:
    """The response verified against the challenge it signed and this relying party (and
    `checks`); 401 when it is refused."""
    identity = settings.section(IdentitySettings)
    try:
        return kind.verify(
            credential=parsed,
            expected_challenge=challenge,
            expected_rp_id=identity.webauthn_rp_id,
            expected_origin=list(identity.webauthn_origins),
            **checks,
        )
    except WebAuthnException as error:
        log.info("%s refused: %s", kind.label, error)
        raise _invalid() from None


async def _spend(services: Mfa, challenge: bytes, *, purpose: str) -> Row:
    """Spend the challenge in a transaction of its own, committed before the response is
    checked: any attempt uses it up, a refused one too (issue 25 item 15)."""
    async with services.db.transaction() as conn:
        row = await queries.take_challenge(
            conn, challenge_hash=_challenge_key(services.settings, challenge), purpose=purpose
        )
    if row is None or not row["live"]:
        raise _invalid("The passkey challenge is unknown, expired or already used")
    return row


def _options(options: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(webauthn.options_to_json(options))
    return result


# -- registration -----------------------------------------------------------------------------


async def registration_options(services: Mfa, actor: Principal) -> dict[str, Any]:
    """PublicKeyCredentialCreationOptions (JSON) for a new discoverable passkey. Adding a
    factor is sensitive: step-up here and at registration."""
    await sensitive.require(services, actor, sensitive.PASSKEY_ADDED)
    user_id = actor.user_id
    settings = services.settings
    async with services.db.transaction() as conn:
        user = await queries.lock_user(conn, user_id)
        if user is None:
            raise Unauthorized("invalid_session", "Session is invalid or expired")
        existing = await queries.passkeys_of(conn, user_id)
        if len(existing) >= MAX_PASSKEYS:
            raise Conflict(f"At most {MAX_PASSKEYS} passkeys per user")
        options = webauthn.generate_registration_options(
            rp_id=settings.section(IdentitySettings).webauthn_rp_id,
            rp_name=settings.section(IdentitySettings).webauthn_rp_name,
            user_name=user["email"],
            user_id=user_id.bytes,
            timeout=TIMEOUT_MS,
            authenticator_selection=AuthenticatorSelectionCriteria(
                resident_key=ResidentKeyRequirement.REQUIRED,
                user_verification=UserVerificationRequirement.PREFERRED,
            ),
            exclude_credentials=[
                PublicKeyCredentialDescriptor(id=bytes(row["credential_id"])) for row in existing
            ],
        )
        await _remember(conn, settings, options.challenge, purpose=REGISTER, user_id=user_id)
    return _options(options)


@dataclass(frozen=True)
class Registered:
    passkey: Row
    recovery_codes: list[str]


async def register(
    services: Mfa, actor: Principal, *, credential: dict[str, Any], name: str | None
) -> Registered:
    """Verify the browser's attestation and keep the credential (step-up; the user is told,
    with a link that removes it; the first factor brings the recovery codes, shown once)."""
    await sensitive.require(services, actor, sensitive.PASSKEY_ADDED)
    user_id = actor.user_id
    settings = services.settings
    parsed, challenge, row = await _received(services, _REGISTRATION, credential, purpose=REGISTER)
    async with services.db.transaction() as conn:
        await queries.lock_user(conn, user_id)
        if row["user_id"] != user_id:
            raise _invalid()
        verified = _verified(settings, _REGISTRATION, parsed, challenge)
        aaguid = verified.aaguid if verified.aaguid != NO_AAGUID else None
        label = (name or "").strip() or aaguid_name(aaguid) or "Passkey"
        transports = [
            t.value if isinstance(t, AuthenticatorTransport) else str(t)
            for t in (parsed.response.transports or [])
        ]
        try:
            passkey = await queries.insert_passkey(
                conn,
                user_id=user_id,
                credential_id=verified.credential_id,
                public_key=verified.credential_public_key,
                sign_count=verified.sign_count,
                aaguid=aaguid,
                transports=transports,
                name=label[:100],
                backed_up=verified.credential_backed_up,
            )
        except LookupError:
            raise Conflict("This passkey is already registered") from None
        codes = await factor_added(
            services,
            conn,
            actor,
            sensitive.PASSKEY_ADDED,
            undo={"passkeyId": str(passkey["id"])},
            data={"passkeyId": str(passkey["id"]), "name": passkey["name"]},
        )
    return Registered(passkey=passkey, recovery_codes=codes)


# -- assertions -------------------------------------------------------------------------------


async def authentication_options(
    services: Mfa,
    *,
    purpose: str,
    user_id: uuid.UUID | None = None,
    ticket_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    """PublicKeyCredentialRequestOptions (JSON): the user's passkeys when known (second
    factor, reauthentication), none for passwordless sign-in (discoverable credentials)."""
    settings = services.settings
    async with services.db.transaction() as conn:
        allow = []
        if user_id is not None:
            rows = await queries.passkeys_of(conn, user_id)
            if not rows:
                raise NotFound("No passkey is registered")
            allow = [PublicKeyCredentialDescriptor(id=bytes(r["credential_id"])) for r in rows]
        options = webauthn.generate_authentication_options(
            rp_id=settings.section(IdentitySettings).webauthn_rp_id,
            timeout=TIMEOUT_MS,
            allow_credentials=allow,
            user_verification=UserVerificationRequirement.PREFERRED
            if purpose == SECOND_FACTOR
            else UserVerificationRequirement.REQUIRED,
        )
        await _remember(
            conn, settings, options.challenge, purpose=purpose, user_id=user_id, ticket_id=ticket_id
        )
    return _options(options)


async def verify_assertion(
    services: Mfa,
    credential: dict[str, Any],
    *,
    purpose: str,
    user_id: uuid.UUID | None = None,
    ticket_id: uuid.UUID | None = None,
) -> Row:
    """Check an assertion against a challenge of `purpose` (and its user or ticket); the
    passkey row (its counter and last use updated). Passwordless and reauthentication
    require user verification (the passkey is the whole proof)."""
    settings = services.settings
    parsed, challenge, row = await _received(services, _ASSERTION, credential, purpose=purpose)
    async with services.db.transaction() as conn:
        if user_id is not None and row["user_id"] != user_id:
            raise _invalid()
        if ticket_id is not None and row["ticket_id"] != ticket_id:
            raise _invalid()
        passkey = await queries.passkey_by_credential(conn, parsed.raw_id)
        if passkey is None or (user_id is not None and passkey["user_id"] != user_id):
            raise _invalid()
        handle = parsed.response.user_handle
        if handle and handle != passkey["user_id"].bytes:
            raise _invalid()
        verified = _verified(
            settings,
            _ASSERTION,
            parsed,
            challenge,
            credential_public_key=bytes(passkey["public_key"]),
            credential_current_sign_count=int(passkey["sign_count"]),
            require_user_verification=purpose != SECOND_FACTOR,
        )
        await queries.touch_passkey(
            conn, passkey_id=passkey["id"], sign_count=verified.new_sign_count
        )
    return passkey


# -- management -------------------------------------------------------------------------------


async def list_passkeys(services: Mfa, user_id: uuid.UUID) -> list[Row]:
    async with services.db.connection() as conn:
        return await queries.passkeys_of(conn, user_id)


async def rename(services: Mfa, user_id: uuid.UUID, passkey_id: uuid.UUID, name: str) -> Row:
    async with services.db.connection() as conn:
        row = await queries.rename_passkey(conn, user_id=user_id, passkey_id=passkey_id, name=name)
    if row is None:
        raise NotFound("Passkey not found")
    return row


async def delete(services: Mfa, principal: Principal, passkey_id: uuid.UUID) -> None:
    """Remove a passkey (step-up; the user is told, with a link that puts it back); the last
    factor takes the recovery codes."""
    await sensitive.require(services, principal, sensitive.PASSKEY_REMOVED)
    await remove_factor(
        services,
        principal,
        sensitive.PASSKEY_REMOVED,
        lambda conn: queries.take_passkey(conn, user_id=principal.user_id, passkey_id=passkey_id),
        missing="Passkey not found",
        undo=lambda row: {"passkey": _restorable(row)},
        data=lambda row: {"passkeyId": str(row["id"]), "name": row["name"]},
    )


def _restorable(row: Row) -> dict[str, Any]:
    """A removed passkey as its undo puts it back."""
    return {
        "id": str(row["id"]),
        "credentialId": bytes(row["credential_id"]).hex(),
        "publicKey": bytes(row["public_key"]).hex(),
        "signCount": row["sign_count"],
        "aaguid": row["aaguid"],
        "transports": list(row["transports"]),
        "name": row["name"],
        "backedUp": row["backed_up"],
        "createdAt": row["created_at"].isoformat(),
    }


async def sign_in(services: Mfa, credential: dict[str, Any], *, client: ClientMeta) -> Completed:
    """Passwordless sign-in: a verified assertion of a discoverable passkey starts a session."""
    passkey = await verify_assertion(services, credential, purpose=SIGN_IN)
    async with services.db.transaction() as conn:
        user = await identity_queries.user_by_id(conn, passkey["user_id"])
        if user is None:
            raise _invalid()
        started = await start_default_session(
            services.identity,
            conn,
            user_id=user["id"],
            client=client,
            method="passkey",
            amr=[AMR_PASSKEY],
        )
    return Completed(tokens=started.tokens, user=user, return_to=None, device=started.device)
