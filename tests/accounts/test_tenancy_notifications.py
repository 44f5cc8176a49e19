"""Built-in tenancy notifications (TENANTD_BUILTIN_NOTIFICATIONS): an invitation, a new
member, a role change told to the right people, once, in both queue modes; listed beside the
application's own events; off by default; the `tenantd.` prefix kept for them."""

from __future__ import annotations

import sys
import types
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from tenantd.app.bundle import Domains
from tenantd.notifications import EventDefinition, InAppContent, RegistryError, send
from tenantd.notifications.registry import load_registry
from tenantd.notifications.tenancy import MODULE, events
from tests.accounts.helpers import Team
from tests.factories import mail_text, read_mails
from tests.helpers import data, eventually
from tests.notifications.support import EVENT_MODULE, quiesce
from tests.notifications.test_server_api import key_headers

BUILTIN = [
    events.INVITATION_RECEIVED,
    events.MEMBER_JOINED,
    events.JOIN_REQUEST_RECEIVED,
    events.ROLE_CHANGED,
]


INLINE_ONLY = pytest.mark.parametrize("queues_enabled", [False], ids=["inline"], indirect=True)


@pytest.fixture(params=[False, True], ids=["inline", "queued"])
def queues_enabled(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


@pytest.fixture
def env(env: dict[str, str], queues_enabled: bool) -> dict[str, str]:
    env["TENANTD_BUILTIN_NOTIFICATIONS"] = "true"
    env["TENANTD_EVENT_MODULES"] = EVENT_MODULE
    env["QUEUES_ENABLED"] = "true" if queues_enabled else "false"
    env["TENANTD_JOB_POLL_SECONDS"] = "0.05"
    env["TENANTD_SCHEDULER_ENABLED"] = "false"
    return env


async def inbox(services: Domains, user_id: uuid.UUID) -> list[Any]:
    return await services.db.fetch_all(
        "SELECT event_type, title, body, cta_url, account_id FROM notifications"
        " WHERE user_id = %(u)s ORDER BY created_at",
        {"u": user_id},
    )


async def channels_of(services: Domains, user_id: uuid.UUID, event_type: str) -> set[str]:
    rows = await services.db.fetch_all(
        "SELECT d.channel FROM notification_deliveries d"
        " JOIN notifications n ON n.id = d.notification_id"
        " WHERE n.user_id = %(u)s AND n.event_type = %(t)s",
        {"u": user_id, "t": event_type},
    )
    return {row["channel"] for row in rows}


async def test_invite_accept_and_role_change_tell_the_right_people_once(
    team: Team, services: Domains, factory: Any, login: Any, mail_dir: Path
) -> None:
    invitee = await factory.user(first_name="Bea", last_name="Lee", account=False)
    await services.db.execute(
        "UPDATE users SET first_name = 'Ann' WHERE id = %(u)s", {"u": team.owner.id}
    )
    issued = await data(
        await team.owner_client.post(
            f"/api/v1/accounts/{team.account_id}/invitations",
            json={"email": invitee.email, "role": "member"},
        ),
        201,
    )

    async def invited() -> bool:
        return len(await inbox(services, invitee.id)) == 1

    await eventually(invited)
    [note] = await inbox(services, invitee.id)
    assert note["event_type"] == events.INVITATION_RECEIVED
    assert note["title"] == f"Ann invited you to {team.owner.email} account"
    assert note["account_id"] is None  # not a member yet
    # The invitation email already tells them: no second email.
    assert await channels_of(services, invitee.id, events.INVITATION_RECEIVED) == {"in_app"}

    client = await login(invitee, None)
    await data(
        await client.post("/api/v1/invitations/accept", json={"token": issued["token"]}), 200
    )

    async def told() -> bool:
        owner = await inbox(services, team.owner.id)
        admin = await inbox(services, team.admin.id)
        return len(owner) == 1 and len(admin) == 1

    await eventually(told)
    for manager in (team.owner, team.admin):
        [joined] = await inbox(services, manager.id)
        assert joined["event_type"] == events.MEMBER_JOINED
        assert joined["title"] == f"Bea Lee joined {team.owner.email} account"
        assert joined["cta_url"] == f"/accounts/{team.account_id}/members"
        assert joined["account_id"] == team.account_id
    assert await inbox(services, team.member.id) == []  # a plain member is not told
    assert len(await inbox(services, invitee.id)) == 1  # nor the one who joined
    await quiesce(services)
    joined_mail = [m for m in read_mails(mail_dir) if "joined" in str(m["Subject"])]
    assert sorted(str(m["To"]) for m in joined_mail) == sorted([team.owner.email, team.admin.email])
    link = next(line for line in mail_text(joined_mail[0]).splitlines() if "token=" in line)
    assert "/unsubscribe?token=" in link and "/api/" not in link

    # The admin promotes the new member: the member is told, nobody else.
    await data(
        await team.admin_client.patch(
            f"/api/v1/accounts/{team.account_id}/members/{invitee.id}", json={"role": "admin"}
        )
    )

    async def promoted() -> bool:
        return len(await inbox(services, invitee.id)) == 2

    await eventually(promoted)
    role = (await inbox(services, invitee.id))[-1]
    assert role["event_type"] == events.ROLE_CHANGED
    assert role["title"] == f"You are now admin of {team.owner.email} account"
    assert "from member to admin" in role["body"]
    assert len(await inbox(services, team.admin.id)) == 1
    assert len(await inbox(services, team.owner.id)) == 1


async def test_the_acting_user_is_never_told_of_their_own_change(
    services: Domains, factory: Any
) -> None:
    user = await factory.user(password=None)
    payload = {
        "accountId": str(user.account_id),
        "accountName": "A",
        "actorUserId": str(user.id),
        "membershipId": str(uuid.uuid4()),
        "memberUserId": str(uuid.uuid4()),
        "memberName": "B",
        "role": "member",
    }
    outcome = await send(
        services.notifications,
        events.MEMBER_JOINED,
        recipient_user_id=user.id,
        payload=payload,
    )
    assert outcome.status in ("self_action", "queued")
    await quiesce(services)
    assert await inbox(services, user.id) == []


@INLINE_ONLY  # preferences are the engine's; one mode is enough
async def test_a_turned_off_channel_is_suppressed(
    team: Team, services: Domains, factory: Any, login: Any, queues_enabled: bool
) -> None:
    await data(
        await team.owner_client.put(
            "/api/v1/notifications/preferences",
            json={"eventType": events.MEMBER_JOINED, "channel": "in_app", "enabled": False},
        )
    )
    newcomer = await factory.user(password=None, account=False)
    issued = await data(
        await team.owner_client.post(
            f"/api/v1/accounts/{team.account_id}/invitations",
            json={"email": newcomer.email, "role": "member"},
        ),
        201,
    )
    client = await login(newcomer, None)
    await data(
        await client.post("/api/v1/invitations/accept", json={"token": issued["token"]}), 200
    )

    async def admin_told() -> bool:
        return len(await inbox(services, team.admin.id)) == 1

    await eventually(admin_told)
    await quiesce(services)
    status = await services.db.fetch_val(
        "SELECT d.status FROM notification_deliveries d"
        " JOIN notifications n ON n.id = d.notification_id"
        " WHERE n.user_id = %(u)s AND d.channel = 'in_app'",
        {"u": team.owner.id},
    )
    assert status == "suppressed"
    unread = await data(await team.owner_client.get("/api/v1/notifications/unread-count"))
    assert unread["count"] == 0


async def test_listed_beside_the_applications_events(
    team: Team, services: Domains, client: Any
) -> None:
    listed_types = await data(
        await client.get(
            "/api/v1/notifications/event-types", headers=await key_headers(services.db)
        )
    )
    assert [item["type"] for item in listed_types] == [
        *BUILTIN,
        "comment.created",
        "report.ready",
        "ping.simple",
    ]
    body = await data(await team.owner_client.get("/api/v1/notifications/preferences"))
    listed = [item["eventType"] for item in body]
    assert set(BUILTIN) <= set(listed)
    invitation = next(i for i in body if i["eventType"] == events.INVITATION_RECEIVED)
    assert [c["channel"] for c in invitation["channels"]] == ["in_app"]  # sse and push are off
    joined = next(i for i in body if i["eventType"] == events.MEMBER_JOINED)
    assert [c["channel"] for c in joined["channels"]] == ["in_app", "email"]


def test_off_by_default_and_the_prefix_is_reserved(settings: Any, env: dict[str, str]) -> None:
    from tenantd.app.settings import load_settings
    from tenantd.notifications.tenancy import event_modules

    plain = settings.switched("TENANTD_BUILTIN_NOTIFICATIONS", False)
    assert event_modules(plain) == plain.notifications.event_modules
    on = load_settings(environ={**env, "TENANTD_BUILTIN_NOTIFICATIONS": "yes"})
    assert event_modules(on)[0] == MODULE

    class Empty(BaseModel):
        pass

    module = types.ModuleType("fake_app_events")
    module.__file__ = __file__
    module.EVENTS = [  # type: ignore[attr-defined]
        EventDefinition(
            type="tenantd.member.joined",
            schema=Empty,
            default_channels=("in_app",),
            in_app=lambda r, p: InAppContent(title="x"),
        )
    ]
    sys.modules["fake_app_events"] = module
    try:
        with pytest.raises(RegistryError, match="prefix is tenantd's own"):
            load_registry(["fake_app_events"])
    finally:
        del sys.modules["fake_app_events"]


@INLINE_ONLY  # the relay's savepoint is the same in both modes
async def test_a_failure_to_notify_never_holds_back_the_outbox(
    team: Team,
    services: Domains,
    factory: Any,
    monkeypatch: pytest.MonkeyPatch,
    queues_enabled: bool,
) -> None:
    from tenantd.notifications.tenancy import feed

    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("notification engine down")

    monkeypatch.setattr(feed, "send_many", broken)
    invitee = await factory.user(password=None, account=False)
    await data(
        await team.owner_client.post(
            f"/api/v1/accounts/{team.account_id}/invitations",
            json={"email": invitee.email, "role": "member"},
        ),
        201,
    )

    async def numbered() -> bool:
        seq = await services.db.fetch_val(
            "SELECT seq FROM outbox_events WHERE type = 'invitation.created'"
        )
        return seq is not None

    await eventually(numbered)  # the events API and webhooks go on
    assert await inbox(services, invitee.id) == []


@INLINE_ONLY
async def test_a_custom_role_that_deals_with_new_members_is_told(
    team: Team, services: Domains, factory: Any, login: Any
) -> None:
    """Beside owners and admins, members whose custom role holds `members:invite` (here
    through `members:*`) hear of a new member; a role without it does not."""
    for key, grants in (("recruiter", ["members:*"]), ("reader", ["members:read"])):
        body = {"key": key, "name": key, "permissions": grants}
        await data(
            await team.owner_client.post(f"/api/v1/accounts/{team.account_id}/roles", json=body),
            201,
        )
    recruiter = await factory.user(password=None)
    reader = await factory.user(password=None)
    await factory.member(team.account_id, recruiter.id, "recruiter")
    await factory.member(team.account_id, reader.id, "reader")
    joiner = await factory.user(password=None, account=False)
    issued = await data(
        await team.owner_client.post(
            f"/api/v1/accounts/{team.account_id}/invitations",
            json={"email": joiner.email, "role": "member"},
        ),
        201,
    )
    client = await login(joiner, None)
    await data(await client.post("/api/v1/invitations/accept", json={"token": issued["token"]}))

    async def told() -> bool:
        return len(await inbox(services, recruiter.id)) == 1

    await eventually(told)
    [joined] = await inbox(services, recruiter.id)
    assert joined["event_type"] == events.MEMBER_JOINED
    await quiesce(services)
    assert await inbox(services, reader.id) == []
    assert len(await inbox(services, team.admin.id)) == 1
