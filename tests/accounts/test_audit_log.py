"""GET /api/v1/accounts/{id}/audit-log: owner and admin read it, a member gets 403; newest
first; filters by action and actor; keyset pages that stay stable while rows are added."""

from __future__ import annotations

import uuid
from typing import Any

from tenantd import audit
from tenantd.db import Database
from tests.helpers import data, error


async def write(
    db: Database, account_id: Any, action: str, actor: Any = None, **extra: Any
) -> None:
    async with db.transaction() as conn:
        await audit.record(
            conn, account_id=account_id, actor_user_id=actor, action=action, data=extra
        )


async def test_owner_and_admin_read_a_member_is_refused(
    make_client: Any, factory: Any, db: Database
) -> None:
    owner = await factory.user()
    admin, member = await factory.user(), await factory.user()
    await factory.member(owner.account_id, admin.id, "admin")
    await factory.member(owner.account_id, member.id, "member")
    url = f"/api/v1/accounts/{owner.account_id}/audit-log"
    as_owner = await make_client(cookies=await factory.cookies(owner))
    renamed = await as_owner.patch(f"/api/v1/accounts/{owner.account_id}", json={"name": "Acme"})
    assert renamed.status == 200
    page = await data(await as_owner.get(url))
    assert page["nextCursor"] is None
    newest = page["items"][0]
    assert newest["action"] == "account.renamed"
    assert newest["actorUserId"] == str(owner.id) and newest["actorEmail"] == owner.email
    assert newest["data"]["to"] == "Acme"
    assert set(newest) == {
        "id",
        "action",
        "actorUserId",
        "actorEmail",
        "target",
        "data",
        "createdAt",
    }
    as_admin = await make_client(cookies=await factory.cookies(admin, owner.account_id))
    assert (await data(await as_admin.get(url)))["items"] == page["items"]
    as_member = await make_client(cookies=await factory.cookies(member, owner.account_id))
    await error(await as_member.get(url), 403, "FORBIDDEN")
    # Another account's log, even one the caller owns elsewhere: the scope rule (403 / 404).
    await error(await as_owner.get(f"/api/v1/accounts/{admin.account_id}/audit-log"), 403)
    await error(await as_owner.get(f"/api/v1/accounts/{uuid.uuid4()}/audit-log"), 404)


async def test_filters_by_action_and_actor(make_client: Any, factory: Any, db: Database) -> None:
    owner = await factory.user()
    account = owner.account_id
    other = uuid.uuid4()
    await write(db, account, "member.added", owner.id)
    await write(db, account, "member.removed", owner.id)
    await write(db, account, "invitation.revoked", None, reason="expired")
    await write(db, uuid.uuid4(), "member.added", owner.id)  # another account: never shown
    browser = await make_client(cookies=await factory.cookies(owner))
    url = f"/api/v1/accounts/{account}/audit-log"
    added = await data(await browser.get(url, params={"action": "member.added"}))
    assert [i["action"] for i in added["items"]] == ["member.added"]
    system = await data(await browser.get(url, params={"actor": "system"}))
    assert [i["action"] for i in system["items"]] == ["invitation.revoked"]
    assert system["items"][0]["actorUserId"] is None
    by_owner = await data(await browser.get(url, params={"actor": str(owner.id)}))
    assert {i["action"] for i in by_owner["items"]} >= {"member.added", "member.removed"}
    assert all(i["actorUserId"] == str(owner.id) for i in by_owner["items"])
    nobody = await data(await browser.get(url, params={"actor": str(other)}))
    assert nobody["items"] == []
    await error(await browser.get(url, params={"actor": "root'--"}), 422)
    await error(await browser.get(url, params={"cursor": "bm90LWEtY3Vyc29y"}), 422)
    await error(await browser.get(url, params={"cursor": "a/b"}), 422)
    await error(await browser.get(url, params={"limit": "0"}), 422)


async def test_pages_are_stable_while_rows_are_appended(
    make_client: Any, factory: Any, db: Database
) -> None:
    owner = await factory.user()
    account = owner.account_id
    for n in range(10):
        await write(db, account, "step", owner.id, n=n)
    browser = await make_client(cookies=await factory.cookies(owner))
    url = f"/api/v1/accounts/{account}/audit-log"
    first = await data(await browser.get(url, params={"limit": 4}))
    before = [i["id"] for i in first["items"]]
    assert before == sorted(before, reverse=True)  # newest first
    seen = list(before)
    cursor = first["nextCursor"]
    while cursor:
        await write(db, account, "late", owner.id)  # new rows land above the pages read
        page = await data(await browser.get(url, params={"limit": 4, "cursor": cursor}))
        seen.extend(i["id"] for i in page["items"])
        cursor = page["nextCursor"]
    everything_then = await db.fetch_all(
        "SELECT id FROM audit_log WHERE account_id = %(a)s AND id <= %(top)s ORDER BY id DESC",
        {"a": account, "top": before[0]},
    )
    assert seen == [r["id"] for r in everything_then]  # no gap, no repeat
