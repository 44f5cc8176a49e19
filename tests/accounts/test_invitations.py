"""Invitations: the Invitation state table, tokens, email, seats under concurrency."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tenantd.accounts.sweeps import expire_invitations
from tests.accounts.helpers import Team, audit_actions
from tests.auth.helpers import mail_sent
from tests.factories import mail_text, read_mails
from tests.helpers import ORIGIN, SECRET, data, error


def invitations_url(team: Team, suffix: str = "") -> str:
    return f"/api/v1/accounts/{team.account_id}/invitations{suffix}"


async def invite(team: Team, email: str, role: str = "member", client: Any = None) -> Any:
    response = await (client or team.owner_client).post(
        invitations_url(team), json={"email": email, "role": role}
    )
    return await data(response, 201)


async def accept(client: Any, token: str) -> Any:
    return await client.post("/api/v1/invitations/accept", json={"token": token})


# -- none -> pending (create) --------------------------------------------------------------------


async def test_create_returns_raw_token_once_and_stores_only_its_hmac(
    team: Team, db: Any, mail_dir: Any
) -> None:
    issued = await invite(team, "New.Person@Example.COM", "admin", client=team.admin_client)
    invitation, token = issued["invitation"], issued["token"]
    assert invitation["email"] == "new.person@example.com"  # the one normal form
    assert invitation["role"] == "admin"
    assert invitation["invitedBy"] == str(team.admin.id)
    assert len(token) >= 40
    row = await db.fetch_one(
        "SELECT * FROM invitations WHERE id = %(id)s", {"id": invitation["id"]}
    )
    expected = hmac.new(SECRET.encode(), token.encode(), hashlib.sha256).digest()
    assert bytes(row["token_hash"]) == expected
    assert token.encode() not in b"".join(
        str(v).encode() for v in row.values() if not isinstance(v, memoryview)
    )
    # The listing never shows a token again.
    listed = await data(await team.owner_client.get(invitations_url(team)))
    assert [item["id"] for item in listed] == [invitation["id"]]
    assert "token" not in listed[0] and token not in str(listed)
    # The invitee was emailed the accept link (by a job, after the commit).
    await mail_sent(team.owner_client)
    mails = read_mails(mail_dir)
    assert [m["To"] for m in mails] == ["new.person@example.com"]
    text = mail_text(mails[0])
    link = next(line for line in text.splitlines() if "/invitations/accept?token=" in line)
    assert link.startswith(f"{ORIGIN}/invitations/accept?token=")
    assert parse_qs(urlsplit(link.strip()).query)["token"] == [token]
    assert "invitation.created" in await audit_actions(db, team.account_id)


async def test_create_needs_admin_and_the_team_invitations_feature(
    team: Team, make_team: Any, db: Any, factory: Any
) -> None:
    await error(
        await team.member_client.post(
            invitations_url(team), json={"email": "x@example.com", "role": "member"}
        ),
        403,
        "FORBIDDEN",
    )
    free = await make_team(plan="free")
    await error(
        await free.owner_client.post(
            invitations_url(free), json={"email": "x@example.com", "role": "member"}
        ),
        403,
        "FEATURE_NOT_ENABLED",
    )
    # A feature override turns it on without a plan change; off overrides the plan.
    await db.execute(
        "INSERT INTO account_feature_overrides (account_id, feature, enabled)"
        " VALUES (%(a)s, 'team_invitations', true)",
        {"a": free.account_id},
    )
    await invite(free, "x@example.com")
    await db.execute(
        "INSERT INTO account_feature_overrides (account_id, feature, enabled)"
        " VALUES (%(a)s, 'team_invitations', false)",
        {"a": team.account_id},
    )
    await error(
        await team.owner_client.post(
            invitations_url(team), json={"email": "y@example.com", "role": "member"}
        ),
        403,
        "FEATURE_NOT_ENABLED",
    )


async def test_create_validates_role_and_email(team: Team) -> None:
    for body in (
        {"email": "x@example.com", "role": "owner"},
        {"email": "not-an-email", "role": "member"},
        {"email": "x@example.com", "role": "member", "extra": 1},
    ):
        await error(await team.owner_client.post(invitations_url(team), json=body), 422)


async def test_create_refuses_members_and_duplicates(team: Team) -> None:
    await error(
        await team.owner_client.post(
            invitations_url(team), json={"email": team.member.email.upper(), "role": "member"}
        ),
        409,
        "CONFLICT",
    )
    first = await invite(team, "dup@example.com")
    body = await error(
        await team.owner_client.post(
            invitations_url(team), json={"email": "DUP@example.com", "role": "admin"}
        ),
        409,
        "CONFLICT",
    )
    assert body["details"]["invitationId"] == first["invitation"]["id"]


# -- pending -> accepted -------------------------------------------------------------------------


async def test_accept_creates_membership_in_the_same_transaction(
    team: Team, factory: Any, login: Any, db: Any
) -> None:
    invitee = await factory.user(email="Invitee@Example.com", password=None)
    issued = await invite(team, "invitee@example.com", "admin")
    client = await login(invitee)
    accepted = await data(await accept(client, issued["token"]))
    assert accepted["account"] == {"id": str(team.account_id), "name": accepted["account"]["name"]}
    assert accepted["membership"]["role"] == "admin"
    assert accepted["membership"]["userId"] == str(invitee.id)
    row = await db.fetch_one(
        "SELECT accepted_at, accepted_by FROM invitations WHERE id = %(id)s",
        {"id": issued["invitation"]["id"]},
    )
    assert row["accepted_at"] is not None and row["accepted_by"] == invitee.id
    actions = await audit_actions(db, team.account_id)
    assert actions[-2:] == ["invitation.accepted", "membership.created"]
    # The caller keeps its active account; it switches explicitly.
    switched = await data(
        await client.post("/api/v1/accounts/switch", json={"accountId": str(team.account_id)})
    )
    assert switched["role"] == "admin"
    # No longer pending.
    assert await data(await team.owner_client.get(invitations_url(team))) == []


async def test_accept_used_token_is_already_used(team: Team, factory: Any, login: Any) -> None:
    invitee = await factory.user(email="once@example.com", password=None)
    issued = await invite(team, "once@example.com")
    client = await login(invitee)
    await data(await accept(client, issued["token"]))
    await error(await accept(client, issued["token"]), 410, "INVITATION_ALREADY_USED")


async def test_accept_requires_the_invited_address(team: Team, factory: Any, login: Any) -> None:
    other = await factory.user(email="someone-else@example.com", password=None)
    issued = await invite(team, "intended@example.com")
    await error(await accept(await login(other), issued["token"]), 403, "FORBIDDEN")
    # The invitation is still pending for its rightful invitee.
    intended = await factory.user(email="INTENDED@example.com", password=None)
    await data(await accept(await login(intended), issued["token"]))


async def test_accept_when_already_an_active_member_is_a_conflict(team: Team, db: Any) -> None:
    await db.execute(
        "INSERT INTO invitations (account_id, email, role, token_hash, expires_at)"
        " VALUES (%(a)s, %(e)s, 'member', %(h)s, now() + interval '1 day')",
        {
            "a": team.account_id,
            "e": team.member.email,
            "h": hmac.new(SECRET.encode(), b"member-token", hashlib.sha256).digest(),
        },
    )
    await error(await accept(team.member_client, "member-token"), 409, "CONFLICT")


async def test_accept_unknown_or_forged_token_is_not_found(team: Team) -> None:
    await error(await accept(team.member_client, "x" * 43), 404, "NOT_FOUND")
    await error(await accept(team.member_client, "' OR 1=1 --"), 404, "NOT_FOUND")
    await error(
        await team.member_client.post("/api/v1/invitations/accept", json={"token": ""}), 422
    )


async def test_accept_requires_a_session(make_client: Any, team: Team) -> None:
    issued = await invite(team, "anon@example.com")
    anonymous = await make_client()
    await error(await accept(anonymous, issued["token"]), 401, "UNAUTHORIZED")


async def test_user_without_an_account_lands_in_the_accepted_account(
    team: Team, factory: Any, login: Any
) -> None:
    homeless = await factory.user(email="homeless@example.com", account=False, password=None)
    issued = await invite(team, "homeless@example.com")
    client = await login(homeless)
    await data(await accept(client, issued["token"]))
    me = await (await client.get("/api/v1/users/me")).json()
    assert me["account"]["id"] == str(team.account_id)
    assert me["role"] == "member"


# -- pending -> pending (resend) ---------------------------------------------------------------


async def test_resend_rotates_the_token_and_kills_the_old_link(
    team: Team, factory: Any, login: Any, mail_dir: Any, db: Any
) -> None:
    invitee = await factory.user(email="rotate@example.com", password=None)
    issued = await invite(team, "rotate@example.com")
    resent = await data(
        await team.admin_client.post(invitations_url(team, f"/{issued['invitation']['id']}/resend"))
    )
    assert resent["invitation"]["id"] == issued["invitation"]["id"]
    assert resent["invitation"]["resentAt"] is not None
    assert resent["token"] != issued["token"]
    await mail_sent(team.owner_client)
    assert len(read_mails(mail_dir)) == 2
    assert resent["token"] in mail_text(read_mails(mail_dir)[-1])
    client = await login(invitee)
    await error(await accept(client, issued["token"]), 404, "NOT_FOUND")
    await data(await accept(client, resent["token"]))
    assert "invitation.resent" in await audit_actions(db, team.account_id)


async def test_resend_refuses_non_pending(team: Team, factory: Any, login: Any) -> None:
    invitee = await factory.user(email="done@example.com", password=None)
    issued = await invite(team, "done@example.com")
    iid = issued["invitation"]["id"]
    await data(await accept(await login(invitee), issued["token"]))
    await error(await team.owner_client.post(invitations_url(team, f"/{iid}/resend")), 409)
    revoked = await invite(team, "gone@example.com")
    rid = revoked["invitation"]["id"]
    await data(await team.owner_client.delete(invitations_url(team, f"/{rid}")))
    await error(await team.owner_client.post(invitations_url(team, f"/{rid}/resend")), 409)
    await error(await team.owner_client.post(invitations_url(team, f"/{uuid.uuid4()}/resend")), 404)


# -- pending -> revoked ------------------------------------------------------------------------


async def test_revoke_is_soft_and_accept_then_fails_revoked(
    team: Team, factory: Any, login: Any, db: Any
) -> None:
    invitee = await factory.user(email="revoked@example.com", password=None)
    issued = await invite(team, "revoked@example.com")
    iid = issued["invitation"]["id"]
    revoked = await data(await team.admin_client.delete(invitations_url(team, f"/{iid}")))
    assert revoked["revokedAt"] is not None
    assert await db.fetch_val("SELECT count(*) FROM invitations WHERE id = %(i)s", {"i": iid}) == 1
    await error(await accept(await login(invitee), issued["token"]), 410, "INVITATION_REVOKED")
    # Revoking again changes nothing.
    again = await data(await team.admin_client.delete(invitations_url(team, f"/{iid}")))
    assert again["revokedAt"] == revoked["revokedAt"]
    assert (await audit_actions(db, team.account_id)).count("invitation.revoked") == 1
    # After a revoke the address can be invited again.
    await invite(team, "revoked@example.com")


async def test_revoke_refuses_accepted(team: Team, factory: Any, login: Any) -> None:
    invitee = await factory.user(email="kept@example.com", password=None)
    issued = await invite(team, "kept@example.com")
    await data(await accept(await login(invitee), issued["token"]))
    await error(
        await team.owner_client.delete(invitations_url(team, f"/{issued['invitation']['id']}")),
        409,
        "CONFLICT",
    )


# -- pending -> revoked by the daily sweep (expiry) ----------------------------------------------


async def test_expired_invitation_fails_expired_and_the_sweep_revokes_it(
    team: Team, factory: Any, login: Any, db: Any
) -> None:
    invitee = await factory.user(email="late@example.com", password=None)
    issued = await invite(team, "late@example.com")
    fresh = await invite(team, "fresh@example.com")
    iid = issued["invitation"]["id"]
    await db.execute(
        "UPDATE invitations SET expires_at = now() - interval '1 second' WHERE id = %(i)s",
        {"i": iid},
    )
    client = await login(invitee)
    await error(await accept(client, issued["token"]), 410, "INVITATION_EXPIRED")
    assert await expire_invitations(db, dry_run=True) == 1
    assert (
        await db.fetch_val("SELECT revoked_at FROM invitations WHERE id = %(i)s", {"i": iid})
        is None
    )
    assert await expire_invitations(db) == 1
    assert await expire_invitations(db) == 0  # idempotent
    row = await db.fetch_one("SELECT revoked_at FROM invitations WHERE id = %(i)s", {"i": iid})
    assert row["revoked_at"] is not None
    await error(await accept(client, issued["token"]), 410, "INVITATION_EXPIRED")
    fresh_row = await db.fetch_one(
        "SELECT revoked_at FROM invitations WHERE id = %(i)s", {"i": fresh["invitation"]["id"]}
    )
    assert fresh_row["revoked_at"] is None
    audit = await db.fetch_one(
        "SELECT actor_user_id, data FROM audit_log WHERE action = 'invitation.revoked'"
        " AND target = %(t)s",
        {"t": iid},
    )
    assert audit["actor_user_id"] is None and audit["data"]["reason"] == "expired"
    listed = await data(await team.owner_client.get(invitations_url(team)))
    assert [item["id"] for item in listed] == [fresh["invitation"]["id"]]


async def ttl_of(db: Any, iid: str) -> float:
    row = await db.fetch_one(
        "SELECT expires_at - COALESCE(resent_at, created_at) AS ttl FROM invitations"
        " WHERE id = %(i)s",
        {"i": iid},
    )
    return float(row["ttl"].total_seconds())


async def test_default_time_to_live_is_168_hours(team: Team, db: Any) -> None:
    issued = await invite(team, "ttl@example.com")
    assert abs(await ttl_of(db, issued["invitation"]["id"]) - 168 * 3600) < 1


class TestConfiguredTimeToLive:
    @pytest.fixture
    def env(self, env: dict[str, str]) -> dict[str, str]:
        env["INVITATION_TTL_HOURS"] = "5"
        return env

    async def test_invitation_ttl_hours_applies_to_create_and_resend(
        self, team: Team, db: Any
    ) -> None:
        issued = await invite(team, "ttl@example.com")
        iid = issued["invitation"]["id"]
        assert abs(await ttl_of(db, iid) - 5 * 3600) < 1
        await db.execute(
            "UPDATE invitations SET expires_at = now() - interval '1 hour' WHERE id = %(i)s",
            {"i": iid},
        )
        # Resending an expired (not yet swept) invitation revives it for a new TTL.
        await data(await team.owner_client.post(invitations_url(team, f"/{iid}/resend")))
        assert abs(await ttl_of(db, iid) - 5 * 3600) < 1


async def test_sweep_with_a_lowered_ttl_and_batches(team: Team, db: Any) -> None:
    for i in range(5):
        await invite(team, f"batch{i}@example.com")
    await db.execute(
        "UPDATE invitations SET created_at = now() - interval '3 hours' WHERE account_id = %(a)s",
        {"a": team.account_id},
    )
    assert await expire_invitations(db, ttl_hours=4) == 0
    assert await expire_invitations(db, ttl_hours=2, dry_run=True) == 5
    assert await expire_invitations(db, ttl_hours=2, batch_size=2) == 5
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM invitations WHERE revoked_at IS NULL AND account_id = %(a)s",
            {"a": team.account_id},
        )
        == 0
    )


async def test_concurrent_sweeps_revoke_each_invitation_once(team: Team, db: Any) -> None:
    for i in range(30):
        await invite(team, f"race{i}@example.com")
    await db.execute(
        "UPDATE invitations SET expires_at = now() - interval '1 minute' WHERE account_id = %(a)s",
        {"a": team.account_id},
    )
    counts = await asyncio.gather(*(expire_invitations(db, batch_size=3) for _ in range(4)))
    assert sum(counts) == 30
    assert (
        await db.fetch_val("SELECT count(*) FROM audit_log WHERE action = 'invitation.revoked'")
        == 30
    )


# -- seats ---------------------------------------------------------------------------------------


async def test_seat_cap_blocks_accept_and_outstanding_invitations_reserve_nothing(
    team: Team, factory: Any, login: Any, db: Any
) -> None:
    await factory.set_plan(team.account_id, "team", seats=4)  # 3 used
    first = await factory.user(email="s1@example.com", password=None)
    second = await factory.user(email="s2@example.com", password=None)
    one = await invite(team, "s1@example.com")
    two = await invite(team, "s2@example.com")  # more invitations than seats is fine
    await data(await accept(await login(first), one["token"]))
    body = await error(await accept(await login(second), two["token"]), 409, "SEAT_LIMIT_REACHED")
    assert body["details"] == {"seats": 4, "used": 4}
    # A freed seat lets the pending invitation through.
    await data(
        await team.owner_client.delete(f"/api/v1/accounts/{team.account_id}/members/{first.id}")
    )
    await data(await accept(await login(second), two["token"]))


async def test_downgrade_blocks_accepts_but_removes_no_one(
    team: Team, factory: Any, login: Any, db: Any
) -> None:
    invitee = await factory.user(email="after@example.com", password=None)
    issued = await invite(team, "after@example.com")
    await factory.set_plan(team.account_id, "team", seats=2)  # below the 3 members
    await error(await accept(await login(invitee), issued["token"]), 409, "SEAT_LIMIT_REACHED")
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL",
            {"a": team.account_id},
        )
        == 3
    )
    detail = await data(await team.member_client.get(f"/api/v1/accounts/{team.account_id}"))
    assert (detail["seats"], detail["seatsUsed"]) == (2, 3)


@pytest.mark.parametrize("seats", [4, 7])
async def test_concurrent_accepts_never_exceed_the_seat_cap(
    seats: int, team: Team, factory: Any, login: Any, db: Any
) -> None:
    """24 invitees accept at once; exactly seats - 3 get in, the rest see SEAT_LIMIT_REACHED."""
    await factory.set_plan(team.account_id, "team", seats=seats)
    clients, tokens = [], []
    for i in range(24):
        email = f"racer{i}@example.com"
        user = await factory.user(email=email, password=None)
        tokens.append((await invite(team, email))["token"])
        clients.append(await login(user))
    responses = await asyncio.gather(*(accept(c, t) for c, t in zip(clients, tokens, strict=True)))
    statuses = [r.status for r in responses]
    assert statuses.count(200) == seats - 3, statuses
    assert statuses.count(409) == 24 - (seats - 3), statuses
    for response in responses:
        if response.status == 409:
            assert (await response.json())["error"]["code"] == "SEAT_LIMIT_REACHED"
    active = await db.fetch_val(
        "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND revoked_at IS NULL",
        {"a": team.account_id},
    )
    assert active == seats
    accepted = await db.fetch_val(
        "SELECT count(*) FROM invitations WHERE account_id = %(a)s AND accepted_at IS NOT NULL",
        {"a": team.account_id},
    )
    assert accepted == seats - 3


async def test_concurrent_accepts_of_one_invitation_create_one_membership(
    team: Team, factory: Any, login: Any, db: Any
) -> None:
    invitee = await factory.user(email="twice@example.com", password=None)
    issued = await invite(team, "twice@example.com")
    clients = [await login(invitee) for _ in range(20)]
    responses = await asyncio.gather(*(accept(c, issued["token"]) for c in clients))
    statuses = sorted(r.status for r in responses)
    assert statuses.count(200) == 1, statuses
    assert statuses.count(410) == 19, statuses
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM memberships WHERE account_id = %(a)s AND user_id = %(u)s",
            {"a": team.account_id, "u": invitee.id},
        )
        == 1
    )


async def test_accept_into_a_soft_deleted_account_is_not_found(
    team: Team, factory: Any, login: Any
) -> None:
    invitee = await factory.user(email="late2@example.com", password=None)
    issued = await invite(team, "late2@example.com")
    await data(await team.owner_client.delete(f"/api/v1/accounts/{team.account_id}"))
    await error(await accept(await login(invitee), issued["token"]), 404, "NOT_FOUND")


# -- one normal form for the invited address --------------------------------------------------


async def test_invitation_to_another_spelling_is_accepted_by_the_address(
    team: Team, factory: Any, login: Any, db: Any
) -> None:
    issued = await invite(team, "Bob@Exämple.COM")
    assert issued["invitation"]["email"] == "bob@xn--exmple-cua.com"
    # Another spelling of the same address is the same pending invitation.
    for spelling in ("bob@xn--exmple-cua.com", "BOB@exämple.com"):
        await error(
            await team.owner_client.post(
                invitations_url(team), json={"email": spelling, "role": "member"}
            ),
            409,
            "CONFLICT",
        )
    # A user who signed up (or came through an identity provider) as bob@xn--exmple-cua.com.
    bob = await factory.user(email="bob@xn--exmple-cua.com", password=None)
    accepted = await data(await accept(await login(bob), issued["token"]))
    assert accepted["membership"]["userId"] == str(bob.id)
    # ...and an address that only looks similar is not the invited one.
    other = await invite(team, "Bob@Example.com")
    stranger = await factory.user(email="bob@exampIe.com", password=None)
    await error(await accept(await login(stranger), other["token"]), 403, "FORBIDDEN")


async def test_invitation_addresses_without_a_normal_form_are_a_clean_422(team: Team) -> None:
    # (A trailing dot is folded, not refused: "a@exämple.com." is a@xn--exmple-cua.com, the one
    # parser's normal form, as everywhere else.)
    for email in ("@exämple.com", "a@ex\u200dample.com", "a@xn--zz.com", "a@b@exämple.com"):
        await error(
            await team.owner_client.post(
                invitations_url(team), json={"email": email, "role": "member"}
            ),
            422,
            "VALIDATION_ERROR",
        )
