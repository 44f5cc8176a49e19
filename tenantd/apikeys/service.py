"""Server API keys: `tdk_<id>_<secret>`, shown once, stored as an HMAC of SECRET_KEY.

A key carries scopes; a server route names the one scope it needs. The check is a cache
lookup by id and one HMAC-SHA256 (no password hash on this path: the secret has 256 bits
of entropy, so a fast keyed hash is as strong as it needs to be).
"""

from __future__ import annotations

import hmac
import re
import secrets
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from tenantd import audit
from tenantd.apikeys import queries
from tenantd.apikeys.cache import KnownKey
from tenantd.apikeys.domain import ApiKeys
from tenantd.apikeys.principal import ActingKey
from tenantd.db import Conn, Row
from tenantd.errors import Forbidden, NotFound, Unauthorized, ValidationFailed
from tenantd.identity.tokens import token_hash
from tenantd.web.schemas import control_character_fields

SCOPES = (
    "events:read",
    "notifications:send",
    "webhooks:manage",
    "sessions:introspect",
    "notifications:manage",
    "users:manage",
)
PREFIX = "tdk_"
_TOKEN = re.compile(r"tdk_([0-9a-f]{32})_([A-Za-z0-9_-]{43})")
NAME_MAX = 100
TOUCH_EVERY_SECONDS = 60.0  # last_used_at is written at most this often per key and instance


class MissingScope(Forbidden):
    code = "INSUFFICIENT_SCOPE"

    def __init__(self, scope: str):
        super().__init__(f"This API key does not have the scope {scope}", details={"scope": scope})


def missing_key() -> Unauthorized:
    return Unauthorized("missing_api_key", "An API key is required: Authorization: Bearer tdk_...")


def invalid_key() -> Unauthorized:
    return Unauthorized("invalid_api_key", "The API key is invalid or revoked")


@dataclass(frozen=True)
class CreatedKey:
    id: uuid.UUID
    name: str
    scopes: tuple[str, ...]
    token: str  # shown once; only its hash is kept


def parse_scopes(value: str | Iterable[str]) -> tuple[str, ...]:
    """Known scopes, in the order given, each once; an unknown or empty list is refused."""
    items = value.split(",") if isinstance(value, str) else list(value)
    scopes: list[str] = []
    for item in (s.strip() for s in items):
        if not item:
            continue
        if item not in SCOPES:
            raise ValidationFailed(
                {"scopes": f"unknown scope {item!r} (known: {', '.join(SCOPES)})"}
            )
        if item not in scopes:
            scopes.append(item)
    if not scopes:
        raise ValidationFailed({"scopes": f"give at least one of {', '.join(SCOPES)}"})
    return tuple(scopes)


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > NAME_MAX:
        raise ValidationFailed({"name": f"1 to {NAME_MAX} characters"})
    if control_character_fields([("name", name)]):
        raise ValidationFailed({"name": "must not contain control characters"})
    return name


def parse_token(token: str) -> uuid.UUID | None:
    """The key id of a well-formed token, else None."""
    match = _TOKEN.fullmatch(token)
    return uuid.UUID(hex=match.group(1)) if match else None


async def _audited(
    conn: Conn, action: str, key_id: uuid.UUID, operator: str | None, **data: Any
) -> None:
    """The audit row of a change to a key: of no account and no user (keys are the
    operator's); its data the operator who acted, then `data`."""
    await audit.record(
        conn,
        account_id=None,
        actor_user_id=None,
        action=action,
        target=str(key_id),
        data={"actor": {"type": "operator", "id": operator}, **data},
    )


async def create_key(
    conn: Conn,
    *,
    secret_key: str,
    name: str,
    scopes: str | Iterable[str],
    created_by: str | None = None,
) -> CreatedKey:
    """A new key with known scopes; the token is returned here and never again."""
    checked_name = _check_name(name)
    checked_scopes = parse_scopes(scopes)
    key_id = uuid.uuid4()
    token = f"{PREFIX}{key_id.hex}_{secrets.token_urlsafe(32)}"
    await queries.insert_key(
        conn,
        key_id=key_id,
        name=checked_name,
        scopes=checked_scopes,
        secret_hash=token_hash(secret_key, token),
        created_by=created_by,
    )
    await _audited(
        conn, "api_key.created", key_id, created_by, name=checked_name, scopes=list(checked_scopes)
    )
    return CreatedKey(id=key_id, name=checked_name, scopes=checked_scopes, token=token)


async def list_keys(conn: Conn, *, include_revoked: bool = True) -> list[Row]:
    """Every key (newest last) with its scopes, last use and revocation; never a secret."""
    return await queries.list_keys(conn, include_revoked=include_revoked)


async def revoke_key(conn: Conn, key_id: uuid.UUID, *, revoked_by: str | None = None) -> bool:
    """Revoke a key (it is refused at once here, within milliseconds on every instance).
    False when it was already revoked; NotFound when there is no such key."""
    async with conn.transaction():
        row = await queries.revoke_key(conn, key_id)
        if row is None:
            raise NotFound(f"API key {key_id} not found")
        if row["changed"]:
            await _audited(conn, "api_key.revoked", key_id, revoked_by, name=row["name"])
    return bool(row["changed"])


def known_key(row: Row) -> KnownKey:
    return KnownKey(
        key=ActingKey(id=row["id"], name=row["name"], scopes=frozenset(row["scopes"])),
        secret_hash=bytes(row["secret_hash"]),
        revoked=row["revoked"],
    )


async def verify_token(apikeys: ApiKeys, token: str) -> ActingKey:
    """The key a token belongs to, or 401 invalid_api_key (malformed, unknown, wrong
    secret, revoked). A token already verified against the cached row costs a dict lookup;
    a cached key one HMAC; a miss one prepared lookup."""
    cache = apikeys.cache
    known = cache.verified(token)
    if known is None:
        key_id = parse_token(token)
        if key_id is None:
            raise invalid_key()
        known = cache.get(key_id)
        if known is None:
            generation = cache.generation
            async with apikeys.db.connection() as conn:
                row = await queries.key_by_id(conn, key_id)
            if row is None:
                raise invalid_key()
            known = known_key(row)
            cache.store(known, generation)
        secret = token_hash(apikeys.settings.secret_key, token)
        if not hmac.compare_digest(known.secret_hash, secret):
            raise invalid_key()
        cache.remember(token, known)
    if known.revoked:
        raise invalid_key()
    key_id = known.key.id
    if cache.due(key_id, time.monotonic(), TOUCH_EVERY_SECONDS):
        async with apikeys.db.connection() as conn:
            await queries.touch(conn, key_id, every_seconds=TOUCH_EVERY_SECONDS)
    return known.key


def require_scope(key: ActingKey, scope: str | tuple[str, ...]) -> None:
    """The key holds `scope` (a tuple: any one of them), else 403 INSUFFICIENT_SCOPE."""
    wanted = (scope,) if isinstance(scope, str) else scope
    if not any(name in key.scopes for name in wanted):
        raise MissingScope(" or ".join(wanted))
