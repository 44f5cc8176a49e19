"""Bodies and answers of the auth routes."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Annotated, Any

from pydantic import ConfigDict, EmailStr, Field, model_validator
from pydantic.alias_generators import to_camel

from tenantd.db import Row
from tenantd.identity.devices import describe
from tenantd.identity.passwords import MAX_LENGTH, MIN_LENGTH
from tenantd.mfa.schemas import SignedInUserOut
from tenantd.web.schemas import ApiModel, Mailbox, Message, RequestBody

# The refusal of a step-up route to a session whose sign-in is not recent (OpenAPI).
REAUTH_REQUIRED = "REAUTH_REQUIRED: authenticate again first (POST /api/v1/auth/reauth)"


class UserOut(SignedInUserOut):
    """A user in the auth routes' answers: the fields of a sign-in's answer."""

    @classmethod
    def json_of(cls, row: Row) -> dict[str, Any]:
        """What `of(row)` dumps to (camelCase keys, values for orjson), without building the
        model: a user row's columns already have the fields' types (the refresh answer)."""
        return {alias: row[name] for name, alias in _USER_ALIASES}


_USER_ALIASES = [(name, field.alias or name) for name, field in UserOut.model_fields.items()]


class AccountRef(ApiModel):
    id: uuid.UUID
    name: str


class MembershipOut(ApiModel):
    account_id: uuid.UUID
    account_name: str
    role: str
    created_at: dt.datetime


class AuthProviderOut(ApiModel):
    provider: str
    created_at: dt.datetime | None = None


class MeUserOut(UserOut):
    mfa_enabled: bool = Field(False, description="Whether the user has a second factor")


class MeAccountRef(AccountRef):
    require_mfa: bool = Field(False, description="Members need a second factor to use it")


class CurrentUser(ApiModel):
    """GET /me when signed in."""

    user: MeUserOut
    account: MeAccountRef | None
    role: str | None
    memberships: list[MembershipOut]
    features: dict[str, bool]
    permissions: list[str] = Field(
        description="What the role holds in the active account (docs/roles.md); `*` matches"
        ' any run of characters (the owner holds `["*"]`)'
    )
    capabilities: dict[str, bool]
    auth_providers: list[AuthProviderOut]
    has_password_login: bool


class AnonymousUser(ApiModel):
    """GET /me when anonymous: user is null and nothing else."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    user: None = None


class RefreshData(ApiModel):
    user: UserOut | None


class MfaStatus(ApiModel):
    enabled: bool = Field(description="Whether multi-factor authentication is on")


# --- request bodies of the sign-up / sign-in flows -------------------------------------------

Password = Annotated[
    str,
    Field(min_length=MIN_LENGTH, max_length=MAX_LENGTH, description="8 to 256 characters"),
]
Token = Annotated[str, Field(min_length=1, max_length=512, description="Token from the email link")]

# Documented request examples (the OpenAPI test checks each against the schema and the server).
_EMAIL = {"email": "ada@example.com"}
_TOKEN = "vdc0gxvq1cUvTV3Q9LOZJ2zvpYmGeGwMZt4tr2t8Wnk"
_PASSWORD = "correct horse battery staple"

CaptchaToken = Annotated[
    str | None,
    Field(
        max_length=4096,
        description="The bot-check widget's token (CAPTCHA_PROVIDER): required on sign-up,"
        " email-code and password-reset requests, and on login after repeated failures",
    ),
]


class RegisterBody(
    RequestBody,
    json_schema_extra={
        "examples": [{**_EMAIL, "password": _PASSWORD, "firstName": "Ada", "lastName": "Lovelace"}]
    },
):
    email: Mailbox
    password: Password
    first_name: str = Field("", max_length=100)
    last_name: str = Field("", max_length=100)
    captcha_token: CaptchaToken = None


class EmailBody(RequestBody, json_schema_extra={"examples": [_EMAIL]}):
    email: Mailbox


class CaptchaEmailBody(RequestBody, json_schema_extra={"examples": [_EMAIL]}):
    """An address, and the bot check's token when CAPTCHA_PROVIDER is set."""

    email: Mailbox
    captcha_token: CaptchaToken = None


class EmailCodeVerifyBody(
    RequestBody,
    json_schema_extra={"examples": [{**_EMAIL, "code": "042137"}, {"token": _TOKEN}]},
):
    """The address and its 6-digit code, or the token of the mail's link."""

    email: Mailbox | None = None
    code: str | None = Field(None, pattern=r"^[0-9]{6}$", description="The 6 digits mailed")
    token: Token | None = None


class PasswordWarnings(ApiModel):
    warnings: list[str] | None = Field(
        None,
        description='PASSWORD_BREACH_CHECK=warn only: ["password_breached"] when the new'
        " password appears in a known breach (it was accepted)",
    )


class RegisteredOut(Message, PasswordWarnings):
    """POST /auth/register."""


class VerifyEmailBody(RequestBody, json_schema_extra={"examples": [{"token": _TOKEN}]}):
    token: Token
    password: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_LENGTH,
        description="The password chosen at sign-up: installs it from any browser",
    )


class LoginBody(RequestBody, json_schema_extra={"examples": [{**_EMAIL, "password": _PASSWORD}]}):
    email: EmailStr
    # Only the upper bound: a too-short password is simply wrong, not malformed.
    password: str = Field(min_length=1, max_length=MAX_LENGTH)
    captcha_token: CaptchaToken = None


class PasswordResetConfirmBody(
    RequestBody, json_schema_extra={"examples": [{"token": _TOKEN, "password": _PASSWORD}]}
):
    token: Token
    password: Password


class PasswordChangeBody(
    RequestBody,
    json_schema_extra={
        "examples": [
            {"currentPassword": _PASSWORD, "newPassword": "a longer passphrase than before"}
        ]
    },
):
    current_password: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_LENGTH,
        description="Required when the user has a password",
    )
    new_password: Password


class SignedInUser(ApiModel):
    """POST /api/v1/auth/login."""

    user: UserOut


class PasswordChanged(SignedInUser, PasswordWarnings):
    """POST /api/v1/auth/password."""


class PasswordReset(PasswordWarnings):
    """POST /api/v1/auth/password-reset/confirm: empty, or the warnings."""


class VerifiedUser(ApiModel):
    """POST /auth/verify-email: the verified user and the account they land in."""

    user: UserOut
    account: AccountRef
    has_password_login: bool = Field(
        description="False: no password yet (set one with POST /api/v1/auth/password)"
    )


# -- sessions and the security log (issue 14) -------------------------------------------------

# An opaque cursor is the unpadded base64url the server handed out as nextCursor.
Cursor = Annotated[str, Field(max_length=200, pattern=r"^[A-Za-z0-9_-]+$")]


def _with_client(row: Row, *columns: str) -> dict[str, Any]:
    """The row's `columns` and the client it names: its address, its user agent told as
    browser and OS."""
    agent = describe(row["user_agent"])
    return {
        **{column: row[column] for column in columns},
        "ip": row["ip"],
        "browser": agent.browser,
        "os": agent.os,
    }


class SessionOut(ApiModel):
    """A live session (refresh family). `lastUsedAt` is its last refresh (or the sign-in);
    `ip`, `browser`, `os` are those of that request. `method`: password, email_link or the
    OpenID Connect provider's name; null for sessions from before this was recorded."""

    id: uuid.UUID
    current: bool
    created_at: dt.datetime
    last_used_at: dt.datetime
    ip: str | None
    browser: str | None
    os: str | None
    method: str | None

    @classmethod
    def of(cls, row: Row, current: uuid.UUID | None) -> SessionOut:
        """A live session row, its user agent told as browser and OS."""
        return cls(
            current=row["id"] == current,
            **_with_client(row, "id", "created_at", "last_used_at", "method"),
        )


class RevokedSessions(ApiModel):
    revoked: int


class SecurityEventOut(ApiModel):
    id: int
    type: str
    created_at: dt.datetime
    session_id: uuid.UUID | None
    ip: str | None
    browser: str | None
    os: str | None
    data: dict[str, Any]

    @classmethod
    def of(cls, row: Row) -> SecurityEventOut:
        """A security event row, its user agent told as browser and OS."""
        return cls(**_with_client(row, "id", "type", "created_at", "session_id", "data"))


class SecurityEventPage(ApiModel):
    items: list[SecurityEventOut]
    next_cursor: str | None


class SecurityEventsQuery(ApiModel):
    limit: int = Field(default=50, ge=1, le=100)
    cursor: Cursor | None = None


# -- Beyond (issue 18): email change, delete my user, export -----------------------------------


class EmailChangeBody(
    RequestBody, json_schema_extra={"examples": [{"newEmail": "new@example.com"}]}
):
    new_email: Mailbox


class LinkTokenBody(RequestBody, json_schema_extra={"examples": [{"token": _TOKEN}]}):
    token: Token


class EmailChangeCancelled(ApiModel):
    """What a "this wasn't me" link did: `restored` (the address went back to the one the
    link was mailed to), `kept` (it never left it); neither: another account holds that
    address now. Every session ended in all three cases."""

    restored: bool
    kept: bool
    message: str


class UserRef(ApiModel):
    id: uuid.UUID
    email: str


class EmailChanged(ApiModel):
    user: UserRef


class UserDeletedOut(ApiModel):
    deleted_at: dt.datetime
    anonymize_after: dt.datetime
    accounts_deleted: list[uuid.UUID]


PersonName = Annotated[str, Field(max_length=100)]


class ProfileBody(
    RequestBody, json_schema_extra={"examples": [{"firstName": "Ada", "lastName": "Lovelace"}]}
):
    """PATCH /api/v1/users/me: single-line names (an empty string clears one)."""

    first_name: PersonName | None = None
    last_name: PersonName | None = None

    @model_validator(mode="after")
    def _something(self) -> ProfileBody:
        if self.first_name is None and self.last_name is None:
            raise ValueError("give firstName and/or lastName")
        return self


class ProfileOut(ApiModel):
    first_name: str
    last_name: str
