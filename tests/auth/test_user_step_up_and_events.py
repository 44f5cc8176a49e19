"""The user's own dangerous changes: requesting an email change and deleting my user need a
recent authentication (403 REAUTH_REQUIRED); a confirmed (or undone) email change writes
user.updated with the previous address, a deleted user writes user.deleted (and the
account.deleted / membership.revoked of what went with it), in the change's transaction."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenantd.auth import deletion
from tenantd.identity.settings import IdentitySettings
from tests.auth.helpers import mail_sent
from tests.auth.test_email_change import link_token, mails_to
from tests.factories import Factory
from tests.helpers import data, error
from tests.mfa.helpers import signed_in


async def outbox(db: Any, after: int = 0) -> list[dict[str, Any]]:
    """Committed event rows after row id `after` (numbered or not yet)."""
    return list(
        await db.fetch_all(
            "SELECT id, type, actor_type, actor_id, data, previous FROM outbox_events"
            " WHERE id > %(a)s ORDER BY id",
            {"a": after},
        )
    )


async def last_id(db: Any) -> int:
    return int(await db.fetch_val("SELECT coalesce(max(id), 0) FROM outbox_events"))


def stale(settings: Any) -> float:
    return float(settings.section(IdentitySettings).reauth_max_age_seconds + 60)


async def test_email_change_request_needs_a_recent_authentication(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    old = await signed_in(make_client, db, settings, user, auth_age=stale(settings))
    refused = await error(
        await old.post("/api/v1/users/me/email", json={"newEmail": "later@example.org"}),
        403,
        "REAUTH_REQUIRED",
    )
    assert refused["details"]["methods"] == ["password"]
    assert mails_to(mail_dir, "later@example.org") == []
    pending = await db.fetch_val(
        "SELECT count(*) FROM email_changes WHERE user_id = %(u)s", {"u": user.id}
    )
    assert pending == 0
    # After POST /api/v1/auth/reauth the same browser may.
    await data(await old.post("/api/v1/auth/reauth", json={"password": user.password}))
    answer = await old.post("/api/v1/users/me/email", json={"newEmail": "later@example.org"})
    await mail_sent(old)
    assert answer.status == 202


async def test_delete_me_needs_a_recent_authentication(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    user = await factory.user(password=None)
    old = await signed_in(make_client, db, settings, user, auth_age=stale(settings))
    await error(await old.delete("/api/v1/users/me"), 403, "REAUTH_REQUIRED")
    assert await db.fetch_val(
        "SELECT deleted_at IS NULL FROM users WHERE id = %(u)s", {"u": user.id}
    )
    fresh = await signed_in(make_client, db, settings, user)
    await data(await fresh.delete("/api/v1/users/me"))


async def test_confirmed_email_change_emits_user_updated_with_the_previous_address(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    client = await signed_in(make_client, db, settings, user)
    await client.post("/api/v1/users/me/email", json={"newEmail": "moved@example.org"})
    await mail_sent(client)
    start = await last_id(db)
    token = link_token(mails_to(mail_dir, "moved@example.org")[0], "/confirm-email")
    cancel = link_token(mails_to(mail_dir, user.email)[0], "/cancel-email-change")
    assert await outbox(db, start) == []  # requesting changes nothing
    await data(await client.post("/api/v1/users/me/email/confirm", json={"token": token}))
    [event] = await outbox(db, start)
    assert event["type"] == "user.updated"
    assert (event["actor_type"], event["actor_id"]) == ("user", str(user.id))
    assert event["data"]["id"] == str(user.id)
    assert event["data"]["email"] == "moved@example.org"
    assert event["previous"] == {"email": user.email}

    # "This wasn't me" changes it back: user.updated again, and every session ended.
    start = await last_id(db)
    await data(
        await (await make_client()).post("/api/v1/auth/email-change/cancel", json={"token": cancel})
    )
    events = await outbox(db, start)
    assert [e["type"] for e in events] == ["user.updated", "session.revoked_all"]
    assert events[0]["data"]["email"] == user.email
    assert events[0]["previous"] == {"email": "moved@example.org"}


async def test_a_refused_confirmation_emits_nothing(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path
) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, db, settings, user)
    await client.post("/api/v1/users/me/email", json={"newEmail": "taken-later@example.org"})
    await mail_sent(client)
    token = link_token(mails_to(mail_dir, "taken-later@example.org")[0], "/confirm-email")
    await factory.user(email="taken-later@example.org", password=None)
    start = await last_id(db)
    await error(
        await client.post("/api/v1/users/me/email/confirm", json={"token": token}), 409, "CONFLICT"
    )
    assert await outbox(db, start) == []


async def test_delete_me_emits_user_deleted_and_what_went_with_it(
    make_client: Any, factory: Factory, db: Any, settings: Any
) -> None:
    team_owner = await factory.user(plan="team", password=None)
    user = await factory.user(password=None)
    assert team_owner.account_id is not None
    await factory.member(team_owner.account_id, user.id, "admin")
    client = await signed_in(make_client, db, settings, user)
    start = await last_id(db)
    await data(await client.delete("/api/v1/users/me"))
    events = await outbox(db, start)
    by_type: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_type.setdefault(event["type"], []).append(event)
    assert set(by_type) == {
        "account.deleted",
        "membership.revoked",
        "session.revoked_all",
        "user.deleted",
    }
    assert events[-1]["type"] == "user.deleted"
    [gone] = by_type["user.deleted"]
    assert gone["data"]["id"] == str(user.id)
    assert gone["data"]["deletedAt"] and gone["data"]["anonymizeAfter"]
    assert "email" not in gone["data"]  # the address is released, not broadcast
    assert gone["previous"] == {"deletedAt": None}
    [account] = by_type["account.deleted"]
    assert account["data"]["id"] == str(user.account_id)
    assert account["previous"] == {"deletedAt": None}
    revoked = {e["data"]["accountId"] for e in by_type["membership.revoked"]}
    assert revoked == {str(user.account_id), str(team_owner.account_id)}
    assert all(e["actor_id"] == str(user.id) for e in events)


async def test_a_failed_deletion_rolls_its_events_back(
    make_client: Any,
    factory: Factory,
    db: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, db, settings, user)
    start = await last_id(db)

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("the database went away")

    # Fails after account.deleted and membership.revoked were written in the transaction.
    monkeypatch.setattr(deletion, "revoke_all", broken)
    response = await client.delete("/api/v1/users/me")
    assert response.status == 500
    assert await outbox(db, start) == []
    assert await db.fetch_val(
        "SELECT deleted_at IS NULL FROM users WHERE id = %(u)s", {"u": user.id}
    )
    monkeypatch.undo()
    await data(await client.delete("/api/v1/users/me"))
    assert [e["type"] for e in await outbox(db, start)][-1] == "user.deleted"
