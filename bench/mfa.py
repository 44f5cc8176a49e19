"""Sign-in figures: a password login, an email-code sign-in, the first sign-in of a user
imported with a bcrypt hash (bcrypt verify, then the argon2id rehash and its write), and the
second step of an MFA sign-in (TOTP verify).

Both are dominated by CPU on the server: the login by one argon2id verification (tenantd's
parameters: argon2-cffi's RFC 9106 low-memory profile, t=3, m=64 MiB, p=4; its cost on this
machine is measured here in-process and reported), the verify by ticket and TOTP checks, one
AES-GCM decryption and the session insert (no argon2). Every request uses a different user
(login) or a different ticket and user (verify), so no step-window replay or cache helps.
The email-code sign-in (issue 29) checks a keyed hash under the code's row lock, spends the
code, provisions nothing (verified users with an account) and inserts the session: no argon2.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
import uuid
from typing import Any

import aiohttp
import bcrypt
import psycopg2
import pyotp
from argon2 import PasswordHasher

from tenantd import crypto
from tenantd.identity.passwords import hasher
from tenantd.identity.tokens import token_hash
from tenantd.mfa.totp import TOTP_SECRET_INFO

SECRET = "bench-secret-key-0123456789abcdefghijklmnopqrstuvwxyz"
PASSWORD = "bench password for sign-in figures"
USERS = int(os.environ.get("BENCH_SIGNIN_USERS", "400"))  # fewer for a quick look
CONCURRENCY = 8
# What Auth0, Supabase and Clerk exports carry: bcrypt at cost 10.
IMPORTED_BCRYPT_COST = 10


def argon2_cost() -> dict[str, Any]:
    """tenantd's argon2id parameters and the median time of one verification here."""
    ph: PasswordHasher = hasher()
    hashed = ph.hash(PASSWORD)
    times = []
    for _ in range(9):
        started = time.perf_counter()
        ph.verify(hashed, PASSWORD)
        times.append((time.perf_counter() - started) * 1000)
    return {
        "type": "argon2id",
        "time_cost": ph.time_cost,
        "memory_cost_kib": ph.memory_cost,
        "parallelism": ph.parallelism,
        "verify_ms_median": round(statistics.median(times), 1),
    }


def _seed(dsn: str, *, with_totp: bool, password_hash: str | None = None) -> list[dict[str, Any]]:
    """USERS fresh verified users sharing one password hash (tenantd's argon2id unless
    given); with TOTP: a secret each and a live sign-in ticket (token and browser binding
    known to the bench)."""
    password_hash = password_hash or hasher().hash(PASSWORD)
    run = uuid.uuid4().hex[:8]
    users = []
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        for i in range(USERS):
            email = f"signin-{run}-{i}@bench.example"
            cur.execute(
                "INSERT INTO users (email, email_verified_at, mfa_enabled)"
                " VALUES (%s, now(), %s) RETURNING id",
                (email, with_totp),
            )
            user_id = uuid.UUID(str(cur.fetchone()[0]))
            cur.execute(
                "INSERT INTO user_passwords (user_id, password_hash) VALUES (%s, %s)",
                (str(user_id), password_hash),
            )
            user: dict[str, Any] = {"email": email}
            if with_totp:
                secret = pyotp.random_base32(32)
                sealed = crypto.seal(
                    SECRET, TOTP_SECRET_INFO, secret.encode(), associated=user_id.bytes
                )
                cur.execute(
                    "INSERT INTO mfa_totp (user_id, secret_encrypted, confirmed_at)"
                    " VALUES (%s, %s, now())",
                    (str(user_id), psycopg2.Binary(sealed)),
                )
                ticket, binding = uuid.uuid4().hex * 2, uuid.uuid4().hex * 2
                cur.execute(
                    "INSERT INTO mfa_tickets (token_hash, binding_hash, user_id, amr, expires_at)"
                    " VALUES (%s, %s, %s, ARRAY['pwd'], now() + interval '5 minutes')",
                    (
                        psycopg2.Binary(token_hash(SECRET, "mfa-ticket:" + ticket)),
                        psycopg2.Binary(token_hash(SECRET, "mfa-binding:" + binding)),
                        str(user_id),
                    ),
                )
                user.update(secret=secret, ticket=ticket, binding=binding)
            users.append(user)
    return users


async def _drive(url: str, requests: list[dict[str, Any]], origin: str) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for item in requests:
        queue.put_nowait(item)

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal errors
        while not queue.empty():
            item = queue.get_nowait()
            started = time.perf_counter()
            async with session.post(
                url, json=item["body"], headers={"Origin": origin, **item.get("headers", {})}
            ) as response:
                await response.read()
                if response.status != 200:
                    errors += 1
            latencies.append((time.perf_counter() - started) * 1000)

    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(CONCURRENCY)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "rps": round(len(requests) / elapsed, 1),
        "p50_ms": round(latencies[len(latencies) // 2], 2),
        "p99_ms": round(latencies[int(len(latencies) * 0.99) - 1], 2),
        "requests": len(requests),
        "concurrency": CONCURRENCY,
        "errors": errors,
    }


def password_login(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    users = _seed(dsn, with_totp=False)
    requests = [{"body": {"email": u["email"], "password": PASSWORD}} for u in users]
    result = asyncio.run(
        _drive(f"{server_url}/api/v1/auth/login", requests, env["PUBLIC_BASE_URL"])
    )
    return {**result, "argon2": argon2_cost()}


EMAIL_CODE = "123456"  # the same digits for every user: the hash is keyed by the address too


def _seed_email_codes(dsn: str) -> list[dict[str, Any]]:
    """USERS verified users, each with an account and a live email code (its hash as the
    server stores it: HMAC of the address and the code under SECRET_KEY)."""
    run = uuid.uuid4().hex[:8]
    users = []
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        for i in range(USERS):
            email = f"code-{run}-{i}@bench.example"
            cur.execute(
                "INSERT INTO users (email, email_verified_at) VALUES (%s, now()) RETURNING id",
                (email,),
            )
            user_id = str(cur.fetchone()[0])
            cur.execute("INSERT INTO accounts (name) VALUES (%s) RETURNING id", (email,))
            account_id = str(cur.fetchone()[0])
            cur.execute(
                "INSERT INTO memberships (account_id, user_id, role) VALUES (%s, %s, 'owner')",
                (account_id, user_id),
            )
            cur.execute(
                "INSERT INTO email_codes (email, code_hash, link_hash, expires_at)"
                " VALUES (%s, %s, %s, now() + interval '10 minutes')",
                (
                    email,
                    psycopg2.Binary(token_hash(SECRET, f"email-code:{email}:{EMAIL_CODE}")),
                    psycopg2.Binary(token_hash(SECRET, f"email-link:{uuid.uuid4().hex}")),
                ),
            )
            users.append({"email": email})
    return users


def email_code_login(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    users = _seed_email_codes(dsn)
    requests = [{"body": {"email": u["email"], "code": EMAIL_CODE}} for u in users]
    return asyncio.run(
        _drive(f"{server_url}/api/v1/auth/email-code/verify", requests, env["PUBLIC_BASE_URL"])
    )


def imported_bcrypt_login(
    server_url: str, dsn: str, env: dict[str, str], plan: Any
) -> dict[str, Any]:
    """Every request is a user's first sign-in after `tenantd users import`: the stored hash is
    bcrypt (cost 10), verified in its scheme, then replaced by tenantd's argon2id."""
    imported = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(IMPORTED_BCRYPT_COST)).decode()
    users = _seed(dsn, with_totp=False, password_hash=imported)
    requests = [{"body": {"email": u["email"], "password": PASSWORD}} for u in users]
    result = asyncio.run(
        _drive(f"{server_url}/api/v1/auth/login", requests, env["PUBLIC_BASE_URL"])
    )
    with psycopg2.connect(dsn) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM user_passwords p JOIN users u ON u.id = p.user_id"
            " WHERE u.email = ANY(%s) AND p.password_hash LIKE '$argon2id$%%'",
            ([u["email"] for u in users],),
        )
        rehashed = int(cur.fetchone()[0])
    times = []
    for _ in range(9):
        started = time.perf_counter()
        bcrypt.checkpw(PASSWORD.encode(), imported.encode())
        times.append((time.perf_counter() - started) * 1000)
    return {
        **result,
        "bcrypt_cost": IMPORTED_BCRYPT_COST,
        "bcrypt_verify_ms_median": round(statistics.median(times), 1),
        "rehashed": rehashed,
        "argon2": argon2_cost(),
    }


def mfa_verify(server_url: str, dsn: str, env: dict[str, str], plan: Any) -> dict[str, Any]:
    users = _seed(dsn, with_totp=True)
    requests = [
        {
            "body": {"ticket": u["ticket"], "totp": pyotp.TOTP(u["secret"]).now()},
            "headers": {"Cookie": f"mfa_binding={u['binding']}"},
        }
        for u in users
    ]
    return asyncio.run(
        _drive(f"{server_url}/api/v1/auth/mfa/verify", requests, env["PUBLIC_BASE_URL"])
    )
