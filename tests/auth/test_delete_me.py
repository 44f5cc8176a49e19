"""Delete my user (refused while owning a shared account; memberships revoked, solo accounts
soft-deleted, address released, sessions ended; anonymised by the `users` sweep after the grace
window) and GET /api/v1/users/me/export."""

from __future__ import annotations

from typing import Any

from tenantd.auth.deletion import anonymize_deleted_users
from tests.factories import Factory, UserRecord
from tests.helpers import data, error


async def signed_in(make_client: Any, factory: Factory, user: UserRecord, aid: Any = None) -> Any:
    client = await make_client()
    client.session.cookie_jar.update_cookies(
        await factory.cookies(user, aid), response_url=client.make_url("/")
    )
    return client


async def test_refused_while_owning_an_account_with_other_members(
    make_client: Any, factory: Factory, db: Any
) -> None:
    owner = await factory.user(plan="team", password=None)
    member = await factory.user(password=None)
    assert owner.account_id is not None
    await factory.member(owner.account_id, member.id, "member")
    client = await signed_in(make_client, factory, owner)
    refused = await error(await client.delete("/api/v1/users/me"), 409, "TRANSFER_OWNERSHIP_FIRST")
    assert refused["details"] == {"accountIds": [str(owner.account_id)]}
    assert (
        await db.fetch_val("SELECT deleted_at FROM users WHERE id = %(u)s", {"u": owner.id}) is None
    )


async def test_delete_revokes_memberships_soft_deletes_solo_accounts_and_ends_sessions(
    make_client: Any, factory: Factory, db: Any
) -> None:
    team_owner = await factory.user(plan="team", password=None)
    user = await factory.user()
    assert team_owner.account_id is not None
    await factory.member(team_owner.account_id, user.id, "admin")
    client = await signed_in(make_client, factory, user)
    other_browser = await signed_in(make_client, factory, user)

    done = await data(await client.delete("/api/v1/users/me"))
    assert done["accountsDeleted"] == [str(user.account_id)]
    assert await db.fetch_val(
        "SELECT deleted_at IS NOT NULL FROM accounts WHERE id = %(a)s", {"a": user.account_id}
    )
    active = await db.fetch_val(
        "SELECT count(*) FROM memberships WHERE user_id = %(u)s AND revoked_at IS NULL",
        {"u": user.id},
    )
    assert active == 0
    # The team account lives on without the user.
    assert await db.fetch_val(
        "SELECT deleted_at IS NULL FROM accounts WHERE id = %(a)s", {"a": team_owner.account_id}
    )
    await error(await other_browser.get("/api/v1/accounts"), 401)
    # The password no longer signs in, and the address is free for a new sign-up.
    login = await (await make_client()).post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert login.status == 401
    row = await db.fetch_one(
        "SELECT email, deleted_email FROM users WHERE id = %(u)s", {"u": user.id}
    )
    assert row["deleted_email"] == user.email
    assert row["email"].endswith("@invalid")
    again = await factory.user(email=user.email, password=None)
    assert again.id != user.id
    actions = {
        r["action"]
        for r in await db.fetch_all(
            "SELECT action FROM audit_log WHERE actor_user_id = %(u)s", {"u": user.id}
        )
    }
    assert {"user.deleted", "membership.revoked", "account.soft_deleted"} <= actions


async def test_the_sweep_anonymises_after_the_grace_window(
    make_client: Any, factory: Factory, db: Any
) -> None:
    user = await factory.user(first_name="Ada", last_name="Lovelace", password=None)
    client = await signed_in(make_client, factory, user)
    await db.execute(
        "INSERT INTO notifications (user_id, event_type, title) VALUES (%(u)s, 'x.y', 'hi')",
        {"u": user.id},
    )
    await data(await client.delete("/api/v1/users/me"))
    assert await anonymize_deleted_users(db) == 0  # inside the window
    await db.execute(
        "UPDATE users SET deleted_at = now() - interval '31 days' WHERE id = %(u)s",
        {"u": user.id},
    )
    assert await anonymize_deleted_users(db, dry_run=True) == 1
    assert await anonymize_deleted_users(db) == 1
    assert await anonymize_deleted_users(db) == 0  # idempotent
    row = await db.fetch_one(
        "SELECT first_name, last_name, deleted_email, anonymized_at FROM users WHERE id = %(u)s",
        {"u": user.id},
    )
    assert (row["first_name"], row["last_name"], row["deleted_email"]) == ("", "", None)
    assert row["anonymized_at"] is not None
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM notifications WHERE user_id = %(u)s", {"u": user.id}
        )
        == 0
    )


async def test_export_returns_my_data(make_client: Any, factory: Factory, db: Any) -> None:
    user = await factory.user(first_name="Grace", password=None)
    other = await factory.user(password=None)
    await db.execute(
        "INSERT INTO notifications (user_id, event_type, title) VALUES (%(u)s, 'a.b', 'mine'),"
        " (%(o)s, 'a.b', 'not mine')",
        {"u": user.id, "o": other.id},
    )
    client = await signed_in(make_client, factory, user)
    response = await client.get("/api/v1/users/me/export")
    assert "attachment" in response.headers["Content-Disposition"]
    exported = await data(response)
    assert exported["user"]["email"] == user.email
    assert exported["user"]["firstName"] == "Grace"
    assert [n["title"] for n in exported["notifications"]] == ["mine"]
    assert [m["accountId"] for m in exported["memberships"]] == [str(user.account_id)]
    assert set(exported) >= {
        "identities",
        "sessions",
        "notificationPreferences",
        "pushSubscriptions",
        "emailChanges",
        "auditLog",
    }
    await error(await (await make_client()).get("/api/v1/users/me/export"), 401)


async def test_a_dry_run_counts_every_user_due_not_one_batch(
    make_client: Any, factory: Factory, db: Any
) -> None:
    for name in ("Ada", "Grace", "Edsger"):
        user = await factory.user(first_name=name, password=None)
        await data(await (await signed_in(make_client, factory, user)).delete("/api/v1/users/me"))
    await db.execute(
        "UPDATE users SET deleted_at = now() - interval '31 days' WHERE deleted_at IS NOT NULL"
    )
    due = await db.fetch_val(
        "SELECT count(*) FROM users WHERE anonymized_at IS NULL AND deleted_at IS NOT NULL"
    )
    assert due >= 3
    assert await anonymize_deleted_users(db, batch_size=2, dry_run=True) == due
    assert await anonymize_deleted_users(db, batch_size=2) == due  # two batches and more
    assert await anonymize_deleted_users(db, batch_size=2, dry_run=True) == 0
