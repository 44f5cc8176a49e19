"""Helpers of the signing-key tests: sign in over HTTP, read the keyring, move key time."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tests.helpers import eventually

ME = "/api/v1/users/me"


async def sign_in(client: Any, user: Any) -> str:
    """The auth_token a password sign-in on this instance answers (the client keeps no
    cookie: `me_status` presents exactly the token it is given)."""
    response = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert response.status == 200, await response.text()
    client.session.cookie_jar.clear()  # tokens are presented explicitly, one at a time
    for header in response.headers.getall("Set-Cookie", []):
        name, _, rest = header.partition("=")
        if name == "auth_token":
            return rest.split(";", 1)[0]
    raise AssertionError("no auth_token cookie")


async def me_status(client: Any, token: str) -> int:
    response = await client.get(ME, headers={"Cookie": f"auth_token={token}"})
    return int(response.status)


def signing_kid(app: web.Application) -> str | None:
    key = app[DOMAINS].identity.keyring.signing_key()
    return None if key is None else key.kid


async def take_over_now(db: Database, kid: str) -> None:
    """As if the publication lead had passed: the next key `kid` signs from now, and the key
    it replaces retires now (published until its last token expired, as rotate set it)."""
    async with db.transaction() as conn:
        await conn.execute(
            "UPDATE signing_keys SET retired_at = now() - interval '1 second',"
            " not_after = now() + interval '16 minutes'"
            " WHERE kid <> %(k)s AND retired_at > now()",
            {"k": kid},
        )
        await conn.execute(
            "UPDATE signing_keys SET published_at = now() - interval '10 minutes',"
            " signing_from = now() - interval '1 second' WHERE kid = %(k)s",
            {"k": kid},
        )


async def outlive(db: Database, kid: str) -> None:
    """As if the last token of retired key `kid` had expired: it is past its not_after."""
    await db.execute(
        "UPDATE signing_keys SET retired_at = now() - interval '20 minutes',"
        " not_after = now() - interval '1 second' WHERE kid = %(k)s",
        {"k": kid},
    )


async def signs_with(app: web.Application, kid: str) -> None:
    await eventually(lambda: signing_kid(app) == kid)
