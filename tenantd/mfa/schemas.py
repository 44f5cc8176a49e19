"""Bodies and answers of the MFA and passkey routes."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from pydantic import Field, model_validator

from tenantd.db import Row
from tenantd.web.schemas import ApiModel, RequestBody, RowModel, from_row

Credential = dict[str, Any]
_CREDENTIAL = Field(
    description="The browser's PublicKeyCredential as JSON (`credential.toJSON()`)",
)


class MfaStatusOut(ApiModel):
    enabled: bool = Field(description="Whether the user has a second factor")
    methods: list[str] = Field(description="totp, passkey, recoveryCode")
    recovery_codes_remaining: int


class TotpSetupOut(ApiModel):
    secret: str = Field(description="Base32 secret, for typing into an authenticator app")
    otpauth_uri: str
    qr_svg: str = Field(description="The otpauth URI as an SVG QR code")


class CodeBody(RequestBody, json_schema_extra={"examples": [{"code": "123456"}]}):
    code: str = Field(min_length=6, max_length=10)


class RecoveryCodesOut(ApiModel):
    recovery_codes: list[str] = Field(description="Shown once; each works once")


class MfaChallengeOut(ApiModel):
    """POST /api/v1/auth/login (or the OIDC callback) for a user with a second factor."""

    mfa_required: bool = True
    methods: list[str]
    ticket: str = Field(description="Single use, 5 minutes, only from this browser")


class SecondFactor(RequestBody):
    totp: str | None = Field(None, min_length=6, max_length=10)
    recovery_code: str | None = Field(None, min_length=8, max_length=32)
    passkey: Credential | None = None

    def one(self) -> None:
        given = [x for x in (self.totp, self.recovery_code, self.passkey) if x is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of totp, recoveryCode, passkey")


class VerifyBody(SecondFactor, json_schema_extra={"examples": [{"ticket": "t", "totp": "123456"}]}):
    ticket: str = Field(min_length=1, max_length=512)

    @model_validator(mode="after")
    def _one(self) -> VerifyBody:
        self.one()
        return self


class ReauthBody(RequestBody, json_schema_extra={"examples": [{"password": "correct horse"}]}):
    password: str | None = Field(None, min_length=1, max_length=256)
    totp: str | None = Field(None, min_length=6, max_length=10)
    passkey: Credential | None = None

    @model_validator(mode="after")
    def _one(self) -> ReauthBody:
        given = [x for x in (self.password, self.totp, self.passkey) if x is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of password, totp, passkey")
        return self


class ReauthOut(ApiModel):
    auth_time: int
    amr: list[str]


class SignedInUserOut(RowModel):
    id: uuid.UUID
    email: str
    first_name: str = ""
    last_name: str = ""
    email_verified_at: dt.datetime | None = None


class MfaSignedIn(ApiModel):
    user: SignedInUserOut
    return_to: str | None = None


class TicketBody(RequestBody):
    ticket: str | None = Field(
        None, min_length=1, max_length=512, description="Sign-in ticket: passkey as 2nd factor"
    )


class CredentialBody(RequestBody):
    credential: Credential = _CREDENTIAL


class RegisterPasskeyBody(RequestBody):
    credential: Credential = _CREDENTIAL
    name: str | None = Field(None, max_length=100)


class RenameBody(RequestBody, json_schema_extra={"examples": [{"name": "Work laptop"}]}):
    name: str = Field(min_length=1, max_length=100)


class PasskeyOut(ApiModel):
    id: uuid.UUID
    name: str
    created_at: dt.datetime
    last_used_at: dt.datetime | None
    aaguid: str | None
    authenticator_name: str | None
    backed_up: bool

    @classmethod
    def of(cls, row: Row, authenticator_name: str | None) -> PasskeyOut:
        return from_row(cls, row, authenticator_name=authenticator_name)


class PasskeyRegistered(ApiModel):
    passkey: PasskeyOut
    recovery_codes: list[str] = Field(description="Set when this is the first factor; shown once")
