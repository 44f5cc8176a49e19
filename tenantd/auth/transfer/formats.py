"""One JSON line of an export, read into an `ImportedUser` (no database here).

Formats:
- `tenantd`: `{email, firstName?, lastName?, emailVerified, passwordHash?, createdAt?}` (what
  `tenantd users export` writes).
- `clerk`: a row of Clerk's dashboard CSV export as a JSON object (`id`, `first_name`,
  `last_name`, `primary_email_address`, `verified_email_addresses`, `password_digest`,
  `password_hasher`), or a user object of Clerk's Backend API (`email_addresses`,
  `primary_email_address_id`, `external_accounts`, `created_at` in milliseconds).
- `auth0`: a line of Auth0's user export job (`email`, `email_verified`, `given_name`,
  `family_name`, `created_at`, `identities`), with the password hash of Auth0's
  password-hash export (`passwordHash`) or of its import schema (`custom_password_hash`).
- `supabase`: a row of `auth.users` (`email`, `encrypted_password`, `email_confirmed_at`,
  `raw_user_meta_data`, `created_at`) or a user of the Admin API (`user_metadata`,
  `identities`).

Passwords: bcrypt, argon2 (PHC), scrypt-firebase and Django's pbkdf2_sha256 (see
identity/passwords.py); a hash of any other scheme is dropped with a warning (the user
resets the password). OIDC links are kept for the providers tenantd has a preset of, under the
preset's name: they match at sign-in when that preset is configured.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tenantd.addresses import InvalidEmail, canonical_email
from tenantd.identity.passwords import (
    FIREBASE_SCRYPT,
    FirebaseScrypt,
    UnsupportedHash,
    check_hash,
)

FORMATS = ("tenantd", "clerk", "auth0", "supabase")
MAX_NAME = 100

# Provider names of each product that match a tenantd preset (same subject at sign-in).
CLERK_PROVIDERS = {
    "oauth_google": "google",
    "oauth_github": "github",
    "oauth_gitlab": "gitlab",
    "oauth_apple": "apple",
}
AUTH0_PROVIDERS = {"google-oauth2": "google", "github": "github", "apple": "apple"}
SUPABASE_PROVIDERS = {"google": "google", "github": "github", "gitlab": "gitlab", "apple": "apple"}


class BadLine(ValueError):
    """This line cannot be imported (the reason is printed with its number)."""


@dataclass
class ImportedUser:
    email: str
    first_name: str = ""
    last_name: str = ""
    email_verified: bool = False
    password_hash: str | None = None
    created_at: dt.datetime | None = None
    identities: list[tuple[str, str]] = field(default_factory=list)  # (provider, subject)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class HashOptions:
    """Firebase's project parameters, for scrypt-firebase hashes that carry only salt and
    hash (the `tenantd users import --firebase-*` options)."""

    firebase: FirebaseScrypt | None = None


def read_user(record: Any, fmt: str, options: HashOptions | None = None) -> ImportedUser:
    """The user of one decoded JSON line in format `fmt`; BadLine when it has none."""
    if not isinstance(record, dict):
        raise BadLine("not a JSON object")
    reader = _READERS.get(fmt)
    if reader is None:
        raise BadLine(f"unknown format {fmt!r}")
    user = reader(record, options or HashOptions())
    if user.password_hash is not None:
        try:
            check_hash(user.password_hash)
        except UnsupportedHash as exc:
            user.warnings.append(f"password not imported: {exc}")
            user.password_hash = None
    return user


def _email(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BadLine("no email")
    try:
        return canonical_email(value)
    except InvalidEmail as exc:
        raise BadLine(f"invalid email: {exc.reason}") from None


def _name(value: Any) -> str:
    return value.strip()[:MAX_NAME] if isinstance(value, str) else ""


def _flag(value: Any, what: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"true", "false"}:
        return value.lower() == "true"
    raise BadLine(f"{what} must be true or false")


def _time(value: Any, what: str = "createdAt") -> dt.datetime | None:
    """ISO 8601 text, or a number of milliseconds since the epoch (Clerk)."""
    if value is None or value == "":
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return dt.datetime.fromtimestamp(value / 1000, dt.UTC)
    if isinstance(value, str):
        try:
            parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise BadLine(f"{what} is not an ISO 8601 time") from None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    raise BadLine(f"{what} is not a time")


def _split(full: Any) -> tuple[str, str]:
    given, _, family = _name(full).partition(" ")
    return given, family.strip()


def _identities(
    linked: Any, providers: dict[str, str], subject_of: Callable[[dict[str, Any]], Any]
) -> list[tuple[str, str]]:
    """(preset name, subject) of each linked identity of the export whose `provider` names a
    preset in `providers` and whose subject is a non-empty string or number."""
    identities = []
    for identity in linked or []:
        if not isinstance(identity, dict):
            continue
        provider = providers.get(str(identity.get("provider", "")))
        subject = subject_of(identity)
        if provider and isinstance(subject, (str, int)) and str(subject):
            identities.append((provider, str(subject)))
    return identities


def _firebase_short(value: str, options: HashOptions) -> str:
    """`scrypt-firebase$<salt>$<hash>` completed with the project parameters."""
    parts = value.split("$")
    if len(parts) != 3:
        return value
    if options.firebase is None:
        raise BadLine("scrypt-firebase hash without the project parameters (--firebase-*)")
    salt, digest = (_b64(part, "scrypt-firebase") for part in parts[1:])
    return options.firebase.encode(salt=salt, password_hash=digest)


def _b64(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        raise BadLine(f"{what}: not base64") from None


# --- tenantd ------------------------------------------------------------------------------

TENANTD_FIELDS = frozenset(
    {"email", "firstName", "lastName", "emailVerified", "passwordHash", "createdAt"}
)


def _tenantd(record: dict[str, Any], options: HashOptions) -> ImportedUser:
    unknown = sorted(set(record) - TENANTD_FIELDS)
    if unknown:
        raise BadLine(f"unknown fields: {', '.join(unknown)}")
    if "emailVerified" not in record:
        raise BadLine("emailVerified is required")
    password = record.get("passwordHash")
    if password is not None and not isinstance(password, str):
        raise BadLine("passwordHash must be a string")
    if password and password.startswith(FIREBASE_SCRYPT + "$"):
        password = _firebase_short(password, options)
    return ImportedUser(
        email=_email(record.get("email")),
        first_name=_name(record.get("firstName")),
        last_name=_name(record.get("lastName")),
        email_verified=_flag(record["emailVerified"], "emailVerified"),
        password_hash=password or None,
        created_at=_time(record.get("createdAt")),
    )


# --- Clerk --------------------------------------------------------------------------------


def _clerk_hash(digest: Any, hasher: Any, options: HashOptions) -> tuple[str | None, str | None]:
    """(hash in tenantd's form, warning). Clerk's scrypt_firebase digest is
    `<hash>$<salt>$<signer key>$<salt separator>$<rounds>$<memory cost>`."""
    if not isinstance(digest, str) or not digest:
        return None, None
    kind = hasher if isinstance(hasher, str) else ""
    if kind in {"bcrypt", "argon2i", "argon2id", "pbkdf2_sha256_django"} or not kind:
        return digest, None
    if kind == "scrypt_firebase":
        parts = digest.split("$")
        if len(parts) != 6:
            raise BadLine("scrypt_firebase digest must have 6 segments")
        try:
            config = FirebaseScrypt(
                signer_key=_b64(parts[2], "signer key"),
                salt_separator=_b64(parts[3], "salt separator"),
                rounds=int(parts[4]),
                mem_cost=int(parts[5]),
            )
        except ValueError:
            raise BadLine("scrypt_firebase rounds and memory cost must be numbers") from None
        return config.encode(
            salt=_b64(parts[1], "salt"), password_hash=_b64(parts[0], "hash")
        ), None
    return None, f"password not imported: Clerk hasher {kind!r} is not supported"


def _clerk(record: dict[str, Any], options: HashOptions) -> ImportedUser:
    created = _time(record.get("created_at"), "created_at")
    identities: list[tuple[str, str]] = []
    if isinstance(record.get("email_addresses"), list):  # a Backend API user object
        addresses = [a for a in record["email_addresses"] if isinstance(a, dict)]
        primary_id = record.get("primary_email_address_id")
        primary = next((a for a in addresses if a.get("id") == primary_id), None)
        primary = primary or (addresses[0] if addresses else {})
        email = _email(primary.get("email_address"))
        verification = primary.get("verification")
        verified = isinstance(verification, dict) and verification.get("status") == "verified"
        identities = _identities(
            record.get("external_accounts"),
            CLERK_PROVIDERS,
            lambda account: account.get("provider_user_id"),
        )
    else:  # a row of the dashboard's CSV export
        email = _email(record.get("primary_email_address"))
        listed = record.get("verified_email_addresses") or ""
        if isinstance(listed, str):
            listed = [part.strip() for part in listed.replace("|", ",").split(",")]
        verified = any(
            isinstance(item, str) and item.strip().lower() == email.lower() for item in listed
        )
    password, warning = _clerk_hash(
        record.get("password_digest"), record.get("password_hasher"), options
    )
    user = ImportedUser(
        email=email,
        first_name=_name(record.get("first_name")),
        last_name=_name(record.get("last_name")),
        email_verified=verified,
        password_hash=password,
        created_at=created,
        identities=identities,
    )
    if warning:
        user.warnings.append(warning)
    return user


# --- Auth0 --------------------------------------------------------------------------------


def _auth0(record: dict[str, Any], options: HashOptions) -> ImportedUser:
    password = record.get("passwordHash")
    custom = record.get("custom_password_hash")
    if password is None and isinstance(custom, dict):
        value = custom.get("hash")
        password = value.get("value") if isinstance(value, dict) else None
    given, family = _name(record.get("given_name")), _name(record.get("family_name"))
    if not given and not family:
        given, family = _split(record.get("name"))
    identities = _identities(
        record.get("identities"), AUTH0_PROVIDERS, lambda identity: identity.get("user_id")
    )
    verified = record.get("email_verified", False)
    return ImportedUser(
        email=_email(record.get("email")),
        first_name=given,
        last_name=family,
        email_verified=_flag(verified, "email_verified"),
        password_hash=password if isinstance(password, str) and password else None,
        created_at=_time(record.get("created_at"), "created_at"),
        identities=identities,
    )


# --- Supabase -----------------------------------------------------------------------------


def _supabase(record: dict[str, Any], options: HashOptions) -> ImportedUser:
    meta = record.get("raw_user_meta_data") or record.get("user_metadata") or {}
    meta = meta if isinstance(meta, dict) else {}
    given = _name(meta.get("first_name") or meta.get("given_name"))
    family = _name(meta.get("last_name") or meta.get("family_name"))
    if not given and not family:
        given, family = _split(meta.get("full_name") or meta.get("name"))
    identities = _identities(record.get("identities"), SUPABASE_PROVIDERS, _supabase_subject)
    password = record.get("encrypted_password")
    confirmed = record.get("email_confirmed_at") or record.get("confirmed_at")
    return ImportedUser(
        email=_email(record.get("email")),
        first_name=given,
        last_name=family,
        email_verified=_time(confirmed, "email_confirmed_at") is not None,
        password_hash=password if isinstance(password, str) and password else None,
        created_at=_time(record.get("created_at"), "created_at"),
        identities=identities,
    )


def _supabase_subject(identity: dict[str, Any]) -> Any:
    """The user's id at the provider: `provider_id`, else the `sub` of `identity_data`."""
    data = identity.get("identity_data")
    return identity.get("provider_id") or (data.get("sub") if isinstance(data, dict) else None)


_READERS = {"tenantd": _tenantd, "clerk": _clerk, "auth0": _auth0, "supabase": _supabase}
