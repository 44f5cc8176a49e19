"""Every change an application cares about writes its event, with the actor, the object after
the change and, for updates, the changed fields before; a refused change writes none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from tenantd.accounts import invitations, memberships
from tenantd.accounts import service as accounts
from tenantd.accounts.domain import accounts_of
from tenantd.accounts.sweeps import expire_invitations, purge_deleted_accounts
from tenantd.auth import service as auth
from tenantd.auth.domain import auth_of
from tenantd.errors import AppError
from tenantd.outbox import Actor, public_event, pump, read
from tenantd.suppression import service as suppression
from tests.accounts.helpers import principal
from tests.auth.helpers import signed_up
from tests.factories import Factory
from tests.helpers import eventually


async def events(db: Any) -> list[dict[str, Any]]:
    """Every event numbered so far (the app's relay may be numbering them concurrently)."""
    await pump(db)
    await eventually(
        lambda: db.fetch_val("SELECT count(*) = 0 FROM outbox_events WHERE seq IS NULL")
    )
    async with db.connection() as conn:
        rows = await read(conn, after=0, types=None, limit=1000)
    return [public_event(row) for row in rows]


async def types_since(db: Any, count: int) -> list[str]:
    return [e["type"] for e in (await events(db))[count:]]


async def test_sign_up_and_verification(make_client: Any, mail_dir: Path, db: Any) -> None:
    _browser, verified = await signed_up(make_client, mail_dir, "ada@example.com")
    found = await events(db)
    assert [e["type"] for e in found] == [
        "user.created",
        "user.email_verified",
        "account.created",
        "membership.created",
    ]
    created, confirmed, account, membership = found
    user_id = verified["user"]["id"]
    assert (
        created["data"]["emailVerified"] is False and created["data"]["email"] == "ada@example.com"
    )
    assert confirmed["previous"] == {"emailVerified": False}
    assert confirmed["data"]["emailVerified"] is True
    assert confirmed["actor"] == {"type": "user", "id": user_id}
    assert account["accountId"] == verified["account"]["id"] == account["data"]["id"]
    assert membership["data"]["role"] == "owner" and membership["data"]["userId"] == user_id
    assert "previous" not in created and "accountId" not in created


async def test_tenancy_changes(app: web.Application, factory: Factory, db: Any) -> None:
    services = accounts_of(app)
    owner = await factory.user(plan="team")
    account_id = owner.account_id
    assert account_id is not None
    invitee = await factory.user(account=False)
    as_owner = principal(owner, account_id, "owner")
    start = len(await events(db))

    await accounts.rename_account(services, as_owner, account_id, name="Renamed")
    issued = await invitations.create_invitation(
        services, as_owner, account_id, email=invitee.email, role="member"
    )
    await invitations.accept_invitation(
        services, principal(invitee, None), token=issued.token, refresh_token=None
    )
    await memberships.change_role(services, as_owner, account_id, user_id=invitee.id, role="admin")
    await memberships.transfer_ownership(services, as_owner, account_id, user_id=invitee.id)
    as_new_owner = principal(invitee, account_id, "owner")
    await memberships.remove_member(services, as_new_owner, account_id, user_id=owner.id)
    second = await invitations.create_invitation(
        services, as_new_owner, account_id, email="later@example.com", role="member"
    )
    await invitations.revoke_invitation(
        services, as_new_owner, account_id, invitation_id=second.invitation["id"]
    )
    await accounts.delete_account(services, as_new_owner, account_id, refresh_token=None)

    found = (await events(db))[start:]
    assert [e["type"] for e in found] == [
        "account.updated",
        "invitation.created",
        "invitation.accepted",
        "membership.created",
        "membership.role_changed",
        "ownership.transferred",
        "membership.revoked",
        "invitation.created",
        "invitation.revoked",
        "account.deleted",
    ]
    by_type = {e["type"]: e for e in found}
    renamed = by_type["account.updated"]
    assert renamed["data"]["name"] == "Renamed" and "previous" in renamed
    assert renamed["actor"] == {"type": "user", "id": str(owner.id)}
    assert by_type["membership.role_changed"]["previous"] == {"role": "member"}
    assert by_type["membership.role_changed"]["data"]["role"] == "admin"
    transferred = by_type["ownership.transferred"]["data"]
    assert transferred["ownerUserId"] == str(invitee.id)
    assert transferred["previousOwnerUserId"] == str(owner.id)
    assert by_type["membership.revoked"]["data"]["revokedAt"] is not None
    assert by_type["invitation.accepted"]["data"]["status"] == "accepted"
    assert "token" not in str(by_type["invitation.created"]["data"]).lower()
    assert by_type["account.deleted"]["data"]["deletedAt"] is not None
    assert all(e["accountId"] == str(account_id) for e in found)

    # Sweeps: the purge and invitation expiry, by the system.
    await db.execute(
        "UPDATE accounts SET deleted_at = now() - interval '31 days' WHERE id = %(a)s",
        {"a": account_id},
    )
    other = await factory.user(plan="team")
    assert other.account_id is not None
    await invitations.create_invitation(
        services,
        principal(other, other.account_id, "owner"),
        other.account_id,
        email="x@example.com",
        role="member",
    )
    await db.execute("UPDATE invitations SET expires_at = now() - interval '1 minute'")
    mark = len(await events(db))
    await purge_deleted_accounts(db)
    await expire_invitations(db)
    swept = (await events(db))[mark:]
    assert [e["type"] for e in swept] == ["account.purged", "invitation.expired"]
    assert swept[0]["actor"] == {"type": "system", "id": "accounts-sweep"}
    assert swept[0]["data"]["id"] == str(account_id)


async def test_a_refused_change_emits_nothing(
    app: web.Application, factory: Factory, db: Any
) -> None:
    services = accounts_of(app)
    owner = await factory.user()
    member = await factory.user()
    assert owner.account_id is not None
    await factory.member(owner.account_id, member.id)
    start = len(await events(db))
    as_member = principal(member, owner.account_id, "member")
    with pytest.raises(AppError):
        await accounts.rename_account(services, as_member, owner.account_id, name="Nope")
    with pytest.raises(AppError):  # the free plan has no team invitations
        await invitations.create_invitation(
            services, principal(owner, owner.account_id, "owner"), owner.account_id,
            email="y@example.com", role="member",
        )  # fmt: skip
    assert await types_since(db, start) == []


async def test_sessions_and_suppressions(app: web.Application, factory: Factory, db: Any) -> None:
    services = auth_of(app)
    user = await factory.user()
    start = len(await events(db))
    await auth.logout_all(services, user_id=user.id)
    async with db.connection() as conn:
        assert await suppression.add(
            conn, "Bob@Example.com", reason="manual", provider="manual", actor=Actor.operator("ops")
        )
        assert not await suppression.add(
            conn, "bob@example.com", reason="manual", provider="manual"
        )
        await suppression.add_many(
            conn, [("c@example.com", "hard_bounce", {})], provider="sendgrid"
        )
        assert await suppression.remove(conn, "bob@example.com")
        assert not await suppression.remove(conn, "bob@example.com")
    found = (await events(db))[start:]
    assert [e["type"] for e in found] == [
        "session.revoked_all",
        "email.suppressed",
        "email.suppressed",
        "email.unsuppressed",
    ]
    assert found[0]["data"] == {"userId": str(user.id)}
    assert found[1]["actor"] == {"type": "operator", "id": "ops"}
    assert found[1]["data"] == {
        "email": "bob@example.com",
        "reason": "manual",
        "provider": "manual",
    }
    assert found[2]["actor"]["type"] == "system"
