"""Signed access tokens: the bench signs with the server's own keys (read from the database,
as every instance does), and measures what the keys add: a token's first request (the
signature is verified, no memo, no context cache), the JWKS endpoint and introspection."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import aiohttp

from bench.seed import account_uuid, user_uuid
from tenantd.app.settings import load_settings
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.identity.keys.feed import prepare
from tenantd.identity.keys.keyring import Keyring
from tenantd.identity.settings import IdentitySettings
from tenantd.identity.tokens import issue_access_token


def keyring_for(env: dict[str, str]) -> Keyring:
    """The keys the server configured by `env` signs with (created if it has not yet)."""
    settings = load_settings(environ=env)
    keyring = Keyring(
        algorithm=settings.section(IdentitySettings).access_token_alg,
        secret_key=settings.secret_key,
        audience=settings.section(IdentitySettings).access_token_audience,
    )

    async def load() -> None:
        db = await create_database(url_to_dsn(env["DATABASE_URL"]), minsize=1, maxsize=1)
        try:
            await prepare(db, settings, keyring)
        finally:
            await db.close()

    asyncio.run(load())
    return keyring


def access_tokens(
    keyring: Keyring, count: int, accounts: int, *, owners: int | None = None
) -> list[str]:
    """`count` distinct tokens of account owners (users repeat; every token is new). With
    `owners`, the tokens cycle over the first `owners` of them: `access_tokens(k, n, a,
    owners=2000)` are new tokens of the users of `access_tokens(k, 2000, a)`."""
    tokens = []
    cycle = owners or count
    for i in range(1, count + 1):
        index = ((((i - 1) % cycle) + 1) * 37 % accounts) + 1  # owners of distinct accounts
        token, _ = issue_access_token(
            keyring,
            user_id=uuid.UUID(user_uuid(index)),
            account_id=uuid.UUID(account_uuid(index)),
        )
        tokens.append(token)
    return tokens


def introspection(
    server_url: str, tokens: list[str], *, seconds: float, in_flight: int
) -> dict[str, Any]:
    """POST /api/v1/auth/introspect with warm tokens, `in_flight` at once, for `seconds`."""
    return asyncio.run(_introspect(server_url, tokens, seconds, in_flight))


async def _introspect(
    server_url: str, tokens: list[str], seconds: float, in_flight: int
) -> dict[str, Any]:
    url = f"{server_url}/api/v1/auth/introspect"
    latencies: list[float] = []
    errors = 0
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker(start: int, until: float, record: bool) -> None:
            nonlocal errors
            index = start
            while time.perf_counter() < until:
                token = tokens[index % len(tokens)]
                index += in_flight
                began = time.perf_counter()
                async with session.post(url, json={"token": token}) as response:
                    body = await response.json()
                    if response.status != 200 or body.get("active") is not True:
                        errors += 1
                if record:
                    latencies.append(time.perf_counter() - began)

        warm_until = time.perf_counter() + 2.0  # every token once into the caches
        await asyncio.gather(*(worker(i, warm_until, False) for i in range(in_flight)))
        began = time.perf_counter()
        until = began + seconds
        await asyncio.gather(*(worker(i, until, True) for i in range(in_flight)))
        elapsed = time.perf_counter() - began
    latencies.sort()
    count = len(latencies)
    return {
        "rps": round(count / elapsed, 1),
        "p50_ms": round(latencies[count // 2] * 1000, 2) if count else None,
        "p99_ms": round(latencies[int(count * 0.99)] * 1000, 2) if count else None,
        "errors": errors,
        "requests": count,
        "in_flight": in_flight,
        "driver": "aiohttp (one process, JSON bodies)",
    }
