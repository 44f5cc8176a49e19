"""Refresh is rate-limited like login: per client IP and per session family."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from aiohttp import web

from tenantd.bundle import Services
from tenantd.db import Database
from tenantd.identity import rotation
from tenantd.identity.sessions import ClientMeta, renew_batched
from tenantd.identity.tokens import refresh_token_family
from tenantd.ops.config import RateLimitSettings
from tenantd.ops.metrics import METRICS
from tenantd.ops.ratelimit import Counter, counters_for
from tests.helpers import error_of

REFRESH = "/api/v1/auth/refresh"


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env.update(
        {
            "RATE_LIMIT_ENABLED": "true",
            "RATE_LIMIT_REFRESH_PER_SESSION": "3",
            "RATE_LIMIT_REFRESH_PER_IP": "6",
            "RATE_LIMIT_REFRESH_WINDOW_SECONDS": "600",
        }
    )
    return env


async def assert_rate_limited(response: Any) -> None:
    assert response.status == 429, await response.text()
    assert error_of(await response.json())["code"] == "RATE_LIMITED"
    assert 1 <= int(response.headers["Retry-After"]) <= 600


async def test_refresh_is_limited_per_session_family(
    make_client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    for _ in range(3):
        assert (await browser.post(REFRESH)).status == 200
    await assert_rate_limited(await browser.post(REFRESH))
    # Refused before any rotation: the family still has its one live row, and another
    # family from the same address is not held back by this one's limit.
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM sessions WHERE rotated_at IS NULL AND revoked_at IS NULL"
        )
        == 1
    )
    other = await make_client(cookies=await factory.cookies(user))
    assert (await other.post(REFRESH)).status == 200


async def test_parallel_refreshes_of_one_family_cannot_pass_the_limit(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    tabs = [await make_client(cookies=cookies) for _ in range(5)]
    responses = await asyncio.gather(*(tab.post(REFRESH) for tab in tabs))
    statuses = sorted(r.status for r in responses)
    assert statuses == [200, 200, 200, 429, 429], statuses


async def test_refresh_is_limited_per_ip(make_client: Any, factory: Any) -> None:
    user = await factory.user()
    for _ in range(6):
        browser = await make_client(cookies=await factory.cookies(user))
        assert (await browser.post(REFRESH)).status == 200
    late = await make_client(cookies=await factory.cookies(user))
    await assert_rate_limited(await late.post(REFRESH))


async def test_made_up_refresh_tokens_count_against_the_ip(make_client: Any) -> None:
    for attempt in range(6):
        browser = await make_client(cookies={"refresh_token": f"made-up-{attempt}"})
        assert (await browser.post(REFRESH)).status == 401
    browser = await make_client(cookies={"refresh_token": "made-up-again"})
    await assert_rate_limited(await browser.post(REFRESH))


# --- the counters move in the renewal's batched statement (tenantd.identity.rotation) ------


def refresh_counters(services: Services, family_id: uuid.UUID | None) -> list[Counter]:
    rule = services.settings.section(RateLimitSettings).rule("refresh")
    session = str(family_id) if family_id else None
    return counters_for("refresh", rule, ip="127.0.0.1", email_hash=None, session=session)


async def counts(db: Database) -> dict[str, int]:
    rows = await db.fetch_all("SELECT key, count FROM rate_limits")
    return {row["key"].split(":")[1]: row["count"] for row in rows if ":ip:" in row["key"]} | {
        row["key"]: row["count"] for row in rows if ":session:" in row["key"]
    }


async def test_a_batch_counts_its_requests_in_order_and_refuses_those_over_a_limit(
    services: Services, factory: Any, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight families refreshing together from one address (limit 6 per IP): one statement
    counts all eight, the first six in batch order are renewed, the last two are refused
    with the IP limit's Retry-After and keep their live row."""
    statements: list[str] = []
    run = rotation._run_batch

    async def recording(conn: Any, batch: Any, expires_at: Any) -> Any:
        statements.append("counted" if any(r.counters for r, _ in batch) else "plain")
        return await run(conn, batch, expires_at)

    monkeypatch.setattr(rotation, "_run_batch", recording)
    user = await factory.user()
    tokens = [(await factory.tokens(user)).refresh_token for _ in range(8)]
    families = [refresh_token_family(services.settings.secret_key, t) for t in tokens]
    results = await asyncio.gather(
        *(
            renew_batched(
                services.identity.rotation,
                services.settings,
                keyring=services.identity.keyring,
                refresh_token=token,
                client=ClientMeta(ip="127.0.0.1"),
                counters=refresh_counters(services, family),
            )
            for token, family in zip(tokens, families, strict=True)
        )
    )
    assert statements == ["counted"]
    assert [r.renewed is not None for r in results] == [True] * 6 + [False] * 2
    assert all(r.counted for r in results)
    for refused in results[6:]:
        assert refused.verdict is not None and not refused.verdict.allowed
        assert refused.verdict.dimension == "ip"
        assert 1 <= refused.verdict.retry_after <= 600
    assert all(r.verdict is None for r in results[:6])
    assert (await counts(db))["ip"] == 8
    live = await db.fetch_all(
        "SELECT family_id, count(*) AS rows FROM sessions"
        " WHERE rotated_at IS NULL AND revoked_at IS NULL GROUP BY family_id"
    )
    assert {row["family_id"]: row["rows"] for row in live} == {f: 1 for f in families}
    rotated = await db.fetch_val("SELECT count(*) FROM sessions WHERE rotated_at IS NOT NULL")
    assert rotated == 6


async def test_the_same_family_in_one_batch_is_counted_in_request_order(
    services: Services, factory: Any, db: Database
) -> None:
    """Per-session limit 3: the fourth request of a family in one batch (its own tokens,
    as after repeats) is the one refused, with the session dimension."""
    user = await factory.user()
    first = await factory.tokens(user)
    family = refresh_token_family(services.settings.secret_key, first.refresh_token)
    counters = refresh_counters(services, family)
    # Spend three of the family's budget, then one more in a batch beside another family.
    await db.execute(
        "INSERT INTO rate_limits (key, window_start, count)"
        " VALUES (%(k)s, to_timestamp(floor(extract(epoch FROM now()) / 600) * 600), 3)",
        {"k": f"refresh:session:{family}"},
    )
    other = await factory.tokens(user)
    other_family = refresh_token_family(services.settings.secret_key, other.refresh_token)
    over, fine = await asyncio.gather(
        renew_batched(
            services.identity.rotation,
            services.settings,
            keyring=services.identity.keyring,
            refresh_token=first.refresh_token,
            client=ClientMeta(ip="127.0.0.1"),
            counters=counters,
        ),
        renew_batched(
            services.identity.rotation,
            services.settings,
            keyring=services.identity.keyring,
            refresh_token=other.refresh_token,
            client=ClientMeta(ip="127.0.0.1"),
            counters=refresh_counters(services, other_family),
        ),
    )
    assert over.verdict is not None and over.verdict.dimension == "session"
    assert over.renewed is None and fine.renewed is not None
    assert (await counts(db))[f"refresh:session:{family}"] == 4
    assert (await counts(db))["ip"] == 2


async def test_a_refresh_the_batch_counted_but_did_not_renew_is_not_counted_again(
    make_client: Any, factory: Any, db: Database
) -> None:
    """A revoked family's token: counted in the batch, refused by the locked path (401);
    each of its counters moved once."""
    user = await factory.user()
    token = (await factory.tokens(user)).refresh_token
    await db.execute("UPDATE sessions SET revoked_at = now() WHERE user_id = %(u)s", {"u": user.id})
    browser = await make_client(cookies={"refresh_token": token})
    assert (await browser.post(REFRESH)).status == 401
    assert sorted((await counts(db)).values()) == [1, 1]


async def test_a_failed_batch_counts_on_the_locked_path_once(
    make_client: Any, factory: Any, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("the batch statement failed")

    monkeypatch.setattr(rotation, "_arrays", broken)
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    assert (await browser.post(REFRESH)).status == 200
    assert sorted((await counts(db)).values()) == [1, 1]
    # And the limit still holds there: two more renew, the fourth is refused.
    for _ in range(2):
        assert (await browser.post(REFRESH)).status == 200
    await assert_rate_limited(await browser.post(REFRESH))


async def test_a_refused_refresh_is_counted_in_the_metrics(
    make_client: Any, factory: Any, app: web.Application
) -> None:
    refused = app[METRICS].rate_limited.labels("refresh", "session")
    before = refused._value.get()
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    for _ in range(3):
        assert (await browser.post(REFRESH)).status == 200
    await assert_rate_limited(await browser.post(REFRESH))
    assert refused._value.get() == before + 1
