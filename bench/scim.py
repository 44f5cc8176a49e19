"""SCIM directory sync (issue 30): users created and deactivated through /scim/v2/{directory}/
as an identity provider does, with a directory made by the real CLI on a seeded account."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
from typing import Any

import aiohttp

from bench.rounds import ROUNDS, median_of
from bench.seed import account_uuid

USERS_PER_ROUND = 400
IN_FLIGHT = 8
ACCOUNT = 7  # a seeded account, given room for every user the figures create
SCIM_JSON = "application/scim+json"
_batches = itertools.count()


def tenantd(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "tenantd", *args],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


def directory(env: dict[str, str]) -> tuple[str, str]:
    """A directory of the bench account (seats for all): its id and token, from the CLI."""
    account = account_uuid(ACCOUNT)
    tenantd(env, "accounts", "set-plan", account, "team", "--seats", "1000000")
    directory_id, token = tenantd(env, "directories", "create", account, "--name", "bench").split()
    return directory_id, token


def user_body(batch: int, n: int) -> dict[str, Any]:
    return {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": f"scim-{batch}-{n}@bench.example",
        "externalId": f"00u{batch}x{n}",
        "name": {"givenName": "Bench", "familyName": f"User {n}"},
        "active": True,
    }


async def _run(
    session: aiohttp.ClientSession, requests: list[tuple[str, str, dict[str, Any]]], status: int
) -> tuple[list[Any], float, int]:
    """Send the requests, IN_FLIGHT at once: the answers, elapsed seconds and failures."""
    queue: asyncio.Queue[tuple[int, tuple[str, str, dict[str, Any]]]] = asyncio.Queue()
    for item in enumerate(requests):
        queue.put_nowait(item)
    answers: list[Any] = [None] * len(requests)
    failures = 0

    async def worker() -> None:
        nonlocal failures
        while not queue.empty():
            index, (method, url, body) = queue.get_nowait()
            async with session.request(method, url, json=body) as response:
                answers[index] = await response.json(content_type=None)
                failures += response.status != status

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return answers, time.perf_counter() - started, failures


def _session(token: str) -> aiohttp.ClientSession:
    headers = {"Authorization": f"Bearer {token}", "Content-Type": SCIM_JSON}
    return aiohttp.ClientSession(headers=headers)


async def _create_round(base: str, token: str) -> tuple[dict[str, Any], list[str]]:
    batch = next(_batches)
    requests = [("POST", f"{base}/Users", user_body(batch, n)) for n in range(USERS_PER_ROUND)]
    async with _session(token) as session:
        answers, elapsed, failures = await _run(session, requests, 201)
    ids = [answer["id"] for answer in answers if isinstance(answer, dict) and "id" in answer]
    rate = {"rate": round(USERS_PER_ROUND / elapsed, 1), "count": USERS_PER_ROUND}
    return {**rate, "failures": failures}, ids


def scim_create(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    """Users/s created by `POST /Users`: each a new verified tenantd user made a member of the
    account (seat check under the account lock, audit rows, outbox events), 8 at once."""
    directory_id, token = directory(env)
    base = f"{server_url}/scim/v2/{directory_id}"

    async def run() -> dict[str, Any]:
        await _create_round(base, token)  # warm-up
        rounds = [(await _create_round(base, token))[0] for _ in range(ROUNDS)]
        return {**median_of(rounds), "unit": "users/s", "in_flight": IN_FLIGHT}

    return asyncio.run(run())


def scim_deactivate(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    """Users/s deactivated by Entra's `PATCH {"op": "Replace", "path": "active", "value":
    "False"}`: the membership revoked and the user's sessions in the account ended in the same
    transaction, 8 at once (the users are created first, untimed)."""
    directory_id, token = directory(env)
    base = f"{server_url}/scim/v2/{directory_id}"
    body = {
        "schemas": ["urn:ietf:params:scim:api:messages:2.0:PatchOp"],
        "Operations": [{"op": "Replace", "path": "active", "value": "False"}],
    }

    async def one_round() -> dict[str, Any]:
        _, ids = await _create_round(base, token)
        requests = [("PATCH", f"{base}/Users/{scim_id}", body) for scim_id in ids]
        async with _session(token) as session:
            _, elapsed, failures = await _run(session, requests, 200)
        return {"rate": round(len(ids) / elapsed, 1), "count": len(ids), "failures": failures}

    async def run() -> dict[str, Any]:
        await one_round()  # warm-up
        rounds = [await one_round() for _ in range(ROUNDS)]
        return {**median_of(rounds), "unit": "users/s", "in_flight": IN_FLIGHT}

    return asyncio.run(run())
