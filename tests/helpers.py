"""What every test module may import: the test origin and secret, answer unwrapping, a
poll-until-true helper and emptying the database. Fixtures live in conftest.py; nothing is
imported from there."""

from __future__ import annotations

import asyncio
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import jwt

from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.principal import AccessClaims

ORIGIN = "http://127.0.0.1:8080"
SECRET = "test-secret-key-0123456789-abcdefghijklmnopqrstuvwxyz"
PASSWORD = "a long enough passphrase"
# Reference data the migrations seed: kept when a test empties the database.
KEEP_TABLES = {"plans", "schema_migrations"}


async def data(response: Any, status: int = 200) -> Any:
    """The `data` of a success envelope, after checking the status."""
    body = await response.json()
    assert response.status == status, body
    assert body["success"] is True, body
    return body["data"]


def error_of(body: dict[str, Any]) -> dict[str, Any]:
    """The `error` of an already parsed failure envelope."""
    assert body["success"] is False, body
    result: dict[str, Any] = body["error"]
    return result


async def error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """The `error` of a failure envelope, after checking the status (and code if given)."""
    body = await response.json()
    assert response.status == status, body
    result = error_of(body)
    if code is not None:
        assert result["code"] == code, body
    return result


async def eventually(
    check: Callable[[], Any | Awaitable[Any]], *, within: float = 30.0, interval: float = 0.02
) -> Any:
    """Poll `check` (sync or async) until it returns something truthy and return that. The
    bound is generous because the machine is shared; a check that holds returns at once."""
    deadline = time.monotonic() + within
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(interval)


async def truncate_all(db: Database) -> None:
    """Empty every table but the seeded ones (plans, schema_migrations)."""
    rows = await db.fetch_all("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    names = [r["tablename"] for r in rows if r["tablename"] not in KEEP_TABLES]
    if names:
        await db.execute(f"TRUNCATE {', '.join(names)} RESTART IDENTITY CASCADE")


def access_claims(app_or_client: Any, token: str) -> Any:
    """The claims of an access token the server issued, verified as an outside service
    would: PyJWT with the public key its JWKS publishes (SECRET in HS256 mode)."""
    server = getattr(app_or_client, "server", None)
    app = server.app if server is not None else app_or_client
    header = jwt.get_unverified_header(token)
    if header["alg"] == "HS256":
        key: Any = SECRET
    else:
        key = jwt.PyJWKSet.from_dict(app[DOMAINS].identity.keyring.jwks())[header["kid"]]
    payload = jwt.decode(token, key, algorithms=[header["alg"]], issuer="tenantd")
    return AccessClaims(
        user_id=uuid.UUID(payload["sub"]),
        account_id=uuid.UUID(payload["aid"]) if payload.get("aid") else None,
        jti=uuid.UUID(payload["jti"]),
        issued_at=float(payload["iat"]),
        expires_at=float(payload["exp"]),
        session_id=uuid.UUID(payload["sid"]) if payload.get("sid") else None,
    )
