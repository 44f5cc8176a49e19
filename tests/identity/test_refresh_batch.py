"""Refreshes arriving together share one batched statement (`tenantd.identity.rotation`):
each row is still decided on its own, anything not renewed falls back to the locked path,
and two instances racing over the same tokens renew each exactly once, without deadlock."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from tenantd.bundle import Services
from tenantd.db import Database
from tenantd.identity import rotation
from tenantd.identity.rotation import RotationBatcher
from tenantd.identity.sessions import IssuedTokens, renew_batched
from tenantd.identity.settings import IdentitySettings
from tenantd.identity.tokens import token_hash
from tests.helpers import eventually
from tests.identity.test_refresh_reuse import REFRESH, family_rows


@pytest.fixture
def batch_sizes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of every batch taken by any batcher during the test."""
    sizes: list[int] = []
    take = RotationBatcher._take

    def recording(self: RotationBatcher) -> Any:
        batch = take(self)
        sizes.append(len(batch))
        return batch

    monkeypatch.setattr(RotationBatcher, "_take", recording)
    return sizes


async def renew(
    services: Services, refresh_token: str, batcher: RotationBatcher | None = None
) -> Any:
    """A renewal through this instance's batcher, or `batcher` (another instance's)."""
    fast = await renew_batched(
        batcher or services.identity.rotation,
        services.settings,
        keyring=services.identity.keyring,
        refresh_token=refresh_token,
    )
    return fast.renewed


async def test_renewals_arriving_together_share_one_statement(
    services: Services, factory: Any, db: Database, make_client: Any, batch_sizes: list[int]
) -> None:
    users = [await factory.user() for _ in range(10)]
    tokens = [(await factory.tokens(user)).refresh_token for user in users]
    renewed = await asyncio.gather(*(renew(services, t) for t in tokens))
    assert batch_sizes == [10]
    assert all(r is not None for r in renewed)
    for (issued, row), user in zip(renewed, users, strict=True):
        assert isinstance(issued, IssuedTokens)
        assert row["id"] == user.id and row["account_id"] == user.account_id
        assert issued.access.user_id == user.id and issued.access.account_id == user.account_id
    families = await family_rows(db)
    assert [(f["total"], f["live"], f["revoked"]) for f in families] == [(2, 1, 0)] * 10
    # Each successor is a working refresh token of its own family.
    for issued, _ in renewed:
        browser = await make_client(cookies={"refresh_token": issued.refresh_token})
        assert (await browser.post(REFRESH)).status == 200


async def test_a_batch_renews_only_what_is_renewable(
    services: Services, factory: Any, db: Database, make_client: Any, batch_sizes: list[int]
) -> None:
    good, ended, left, cut_off = [await factory.user() for _ in range(4)]
    good_token = (await factory.tokens(good)).refresh_token
    ended_token = (await factory.tokens(ended)).refresh_token
    left_token = (await factory.tokens(left)).refresh_token
    cut_off_token = (await factory.tokens(cut_off)).refresh_token
    await db.execute(
        "UPDATE sessions SET revoked_at = now() WHERE user_id = %(u)s", {"u": ended.id}
    )
    await db.execute(
        "UPDATE memberships SET revoked_at = now() WHERE user_id = %(u)s", {"u": left.id}
    )
    await db.execute(
        "UPDATE users SET tokens_valid_after = now() + interval '1 second' WHERE id = %(u)s",
        {"u": cut_off.id},
    )
    results = await asyncio.gather(
        renew(services, good_token),
        renew(services, ended_token),
        renew(services, good_token),  # the same token twice: not in the batch
        renew(services, left_token),
        renew(services, cut_off_token),
        renew(services, "not-one-of-ours"),
    )
    assert batch_sizes == [4]
    assert [r is not None for r in results] == [True, False, False, False, False, False]
    # Only the good family rotated; the others are as they were.
    rows = await db.fetch_all(
        "SELECT user_id, count(*) AS total, count(rotated_at) AS rotated FROM sessions"
        " GROUP BY user_id"
    )
    by_user = {r["user_id"]: (r["total"], r["rotated"]) for r in rows}
    assert by_user == {good.id: (2, 1), ended.id: (1, 0), left.id: (1, 0), cut_off.id: (1, 0)}
    # The refused ones get the locked path's answer over HTTP: 401, nothing renewed.
    for token in (ended_token, left_token, cut_off_token):
        browser = await make_client(cookies={"refresh_token": token})
        assert (await browser.post(REFRESH)).status == 401


async def test_two_instances_racing_over_the_same_tokens_renew_each_once(
    services: Services, factory: Any, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    """Two batches lock the same rows in opposite request order: rows are locked in id order,
    so neither waits on the other in a cycle; each token is renewed by exactly one of them."""
    caplog.set_level(logging.WARNING, logger="tenantd.identity.rotation")
    ttl_days = services.settings.section(IdentitySettings).refresh_token_ttl_days
    other_instance = RotationBatcher(db, ttl_days)  # another pool: another instance's batcher
    user = await factory.user()
    for _ in range(5):
        tokens = [(await factory.tokens(user)).refresh_token for _ in range(6)]
        results = await asyncio.gather(
            *(renew(services, t) for t in tokens),
            *(renew(services, t, other_instance) for t in reversed(tokens)),
        )
        first, second = results[:6], list(reversed(results[6:]))
        for one, other in zip(first, second, strict=True):
            assert (one is None) != (other is None)  # exactly one instance renewed it
    assert "batched refresh failed" not in caplog.text
    families = await family_rows(db)
    assert len(families) == 30
    assert all((f["total"], f["live"], f["revoked"]) == (2, 1, 0) for f in families)


async def test_a_failed_batch_falls_back_to_the_locked_path(
    factory: Any, db: Database, make_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Any:
        raise RuntimeError("the batch statement failed")

    monkeypatch.setattr("tenantd.identity.rotation._arrays", broken)
    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    response = await browser.post(REFRESH)
    assert response.status == 200, await response.text()
    families = await family_rows(db)
    assert [(f["total"], f["live"], f["revoked"]) for f in families] == [(2, 1, 0)]


async def held_row_lock(db: Database, refresh_token: str, services: Services) -> Any:
    """A transaction on another connection holding the row lock of `refresh_token`'s session
    (as the locked path or another instance would): the context manager and its connection."""
    transaction = db.transaction()
    conn = await transaction.__aenter__()
    await conn.execute(
        "SELECT id FROM sessions WHERE token_hash = %(h)s FOR UPDATE",
        {"h": token_hash(services.settings.secret_key, refresh_token)},
    )
    return transaction


async def a_batch_waits_on_a_lock(db: Database) -> bool:
    waiting = await db.fetch_val(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND query LIKE 'EXECUTE tenantd_rotate_sessions%%'"
    )
    return bool(waiting)


async def test_renewals_arriving_while_a_batch_runs_share_the_next_one(
    services: Services,
    factory: Any,
    db: Database,
    batch_sizes: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One batch at a time: nine renewals arriving one by one while a batch runs wait for it
    and then go together, in one statement."""
    monkeypatch.setattr(rotation, "STALL_SECONDS", 600.0)  # this batch never counts as stalled
    users = [await factory.user() for _ in range(10)]
    tokens = [(await factory.tokens(user)).refresh_token for user in users]
    lock = await held_row_lock(db, tokens[0], services)
    first = asyncio.create_task(renew(services, tokens[0]))
    await eventually(lambda: a_batch_waits_on_a_lock(db))
    batcher = services.identity.rotation
    later = []
    for token in tokens[1:]:
        later.append(asyncio.create_task(renew(services, token)))
        await eventually(lambda n=len(later): len(batcher.pending) == n)  # one turn each
    assert batch_sizes == [1] and not any(task.done() for task in later)
    await lock.__aexit__(None, None, None)
    results = await asyncio.gather(first, *later)
    assert all(result is not None for result in results)
    assert batch_sizes == [1, 9]


async def test_a_batch_stalled_on_a_lock_holds_up_no_other_renewal(
    services: Services, factory: Any, db: Database, batch_sizes: list[int]
) -> None:
    """A batch waiting on a row lock stops counting after STALL_SECONDS: the renewals that
    arrive meanwhile run in a batch of their own and finish while the lock is still held."""
    users = [await factory.user() for _ in range(4)]
    tokens = [(await factory.tokens(user)).refresh_token for user in users]
    lock = await held_row_lock(db, tokens[0], services)
    try:
        first = asyncio.create_task(renew(services, tokens[0]))
        await eventually(lambda: a_batch_waits_on_a_lock(db))
        others = await asyncio.wait_for(
            asyncio.gather(*(renew(services, t) for t in tokens[1:])), timeout=60
        )
        assert all(result is not None for result in others)
        assert not first.done()
    finally:
        await lock.__aexit__(None, None, None)
    assert await first is not None
    assert batch_sizes[0] == 1 and sum(batch_sizes) == 4
