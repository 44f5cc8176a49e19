"""Change of email address: a link to the new address, a notice with "this wasn't me" to the old
one; the change happens only on confirmation; cancel (or undo) ends every session."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.auth.helpers import mail_sent
from tests.factories import Factory, UserRecord, mail_text, read_mails
from tests.helpers import ORIGIN, data, error
from tests.mfa.helpers import enrol_totp


async def signed_in(make_client: Any, factory: Factory, user: UserRecord) -> Any:
    client = await make_client()
    client.session.cookie_jar.update_cookies(
        await factory.cookies(user), response_url=client.make_url("/")
    )
    return client


def mails_to(mail_dir: Path, address: str) -> list[Any]:
    return [m for m in read_mails(mail_dir) if m["To"] == address]


def link_token(message: Any, path: str) -> str:
    text = mail_text(message)
    url = re.search(rf"{re.escape(ORIGIN + path)}\?token=\S+", text)
    assert url is not None, text
    return parse_qs(urlsplit(url.group(0)).query)["token"][0]


async def user_email(db: Any, user: UserRecord) -> str:
    return str(await db.fetch_val("SELECT email FROM users WHERE id = %(u)s", {"u": user.id}))


async def test_change_happens_only_on_confirmation(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    answer = await client.post("/api/v1/users/me/email", json={"newEmail": "New@Example.ORG"})
    await mail_sent(client)
    assert answer.status == 202
    assert await user_email(db, user) == user.email  # nothing changed yet
    [confirm] = mails_to(mail_dir, "new@example.org")
    [notice] = mails_to(mail_dir, user.email)
    assert "new@example.org" in mail_text(notice)
    token = link_token(confirm, "/confirm-email")
    link_token(notice, "/cancel-email-change")

    changed = await data(await client.post("/api/v1/users/me/email/confirm", json={"token": token}))
    assert changed["user"]["email"] == "new@example.org"
    assert await user_email(db, user) == "new@example.org"
    me = await (await client.get("/api/v1/users/me")).json()
    assert me["user"]["email"] == "new@example.org"
    # Single use.
    await error(
        await client.post("/api/v1/users/me/email/confirm", json={"token": token}),
        422,
        "VALIDATION_ERROR",
    )
    assert "user.email_changed" in [
        r["action"]
        for r in await db.fetch_all(
            "SELECT action FROM audit_log WHERE target = %(t)s", {"t": str(user.id)}
        )
    ]


async def test_another_user_cannot_use_the_token(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user(password=None)
    other = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    await client.post("/api/v1/users/me/email", json={"newEmail": "mine@example.org"})
    await mail_sent(client)
    token = link_token(mails_to(mail_dir, "mine@example.org")[0], "/confirm-email")
    thief = await signed_in(make_client, factory, other)
    await error(await thief.post("/api/v1/users/me/email/confirm", json={"token": token}), 422)
    assert await user_email(db, other) == other.email
    anonymous = await make_client()
    await error(await anonymous.post("/api/v1/users/me/email/confirm", json={"token": token}), 401)


async def test_an_address_in_use_is_never_taken_and_the_answer_is_the_same(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user(password=None)
    owner = await factory.user(email="taken@example.org", password=None)
    client = await signed_in(make_client, factory, user)
    free = await client.post("/api/v1/users/me/email", json={"newEmail": "free@example.org"})
    await mail_sent(client)
    taken = await client.post("/api/v1/users/me/email", json={"newEmail": "Taken@example.org"})
    await mail_sent(client)
    assert taken.status == free.status == 202
    assert (await taken.json())["data"] == (await free.json())["data"]
    [told] = mails_to(mail_dir, "taken@example.org")
    assert "nothing changed" in mail_text(told)
    assert "token=" not in mail_text(told)
    assert await user_email(db, owner) == "taken@example.org"


async def test_confirming_after_someone_took_the_address_is_409(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    await client.post("/api/v1/users/me/email", json={"newEmail": "race@example.org"})
    await mail_sent(client)
    token = link_token(mails_to(mail_dir, "race@example.org")[0], "/confirm-email")
    await factory.user(email="race@example.org", password=None)
    await error(
        await client.post("/api/v1/users/me/email/confirm", json={"token": token}), 409, "CONFLICT"
    )
    assert await user_email(db, user) == user.email


@pytest.mark.parametrize("bad", ["", "no-at-sign", "a b@example.org", "x@exa\u0000mple.org"])
async def test_invalid_new_addresses(make_client: Any, factory: Factory, bad: str) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    await error(await client.post("/api/v1/users/me/email", json={"newEmail": bad}), 422)


async def test_same_address_is_refused(make_client: Any, factory: Factory) -> None:
    user = await factory.user(password=None)
    client = await signed_in(make_client, factory, user)
    same = user.email.upper()
    await error(await client.post("/api/v1/users/me/email", json={"newEmail": same}), 422)


async def test_this_wasnt_me_cancels_and_ends_every_session(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user(password=None)
    attacker = await signed_in(make_client, factory, user)
    await attacker.post("/api/v1/users/me/email", json={"newEmail": "evil@example.org"})
    await mail_sent(attacker)
    confirm = link_token(mails_to(mail_dir, "evil@example.org")[0], "/confirm-email")
    cancel = link_token(mails_to(mail_dir, user.email)[0], "/cancel-email-change")

    victim = await make_client()  # the old mailbox's owner, not signed in
    await data(await victim.post("/api/v1/auth/email-change/cancel", json={"token": cancel}))
    await error(await attacker.get("/api/v1/accounts"), 401)  # sessions ended
    await error(await victim.post("/api/v1/auth/email-change/cancel", json={"token": cancel}), 422)
    again = await signed_in(make_client, factory, user)
    await error(await again.post("/api/v1/users/me/email/confirm", json={"token": confirm}), 422)
    assert await user_email(db, user) == user.email


async def test_this_wasnt_me_after_confirmation_changes_the_address_back(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    attacker = await signed_in(make_client, factory, user)
    await attacker.post("/api/v1/users/me/email", json={"newEmail": "evil2@example.org"})
    await mail_sent(attacker)
    confirm = link_token(mails_to(mail_dir, "evil2@example.org")[0], "/confirm-email")
    cancel = link_token(mails_to(mail_dir, user.email)[0], "/cancel-email-change")
    await data(await attacker.post("/api/v1/users/me/email/confirm", json={"token": confirm}))
    assert await user_email(db, user) == "evil2@example.org"

    victim = await make_client()
    await data(await victim.post("/api/v1/auth/email-change/cancel", json={"token": cancel}))
    assert await user_email(db, user) == user.email
    await error(await attacker.get("/api/v1/accounts"), 401)
    # The owner signs in again with the old address.
    login = await victim.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert login.status == 200


async def test_unknown_cancel_token(make_client: Any) -> None:
    client = await make_client()
    await error(
        await client.post("/api/v1/auth/email-change/cancel", json={"token": uuid.uuid4().hex}),
        422,
    )


async def test_invitations_and_suppression_follow_the_new_address(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user(password=None)
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider) VALUES"
        " ('moved@example.org', 'hard_bounce', 'smtp')"
    )
    client = await signed_in(make_client, factory, user)
    await client.post("/api/v1/users/me/email", json={"newEmail": "Moved@Example.org"})
    await mail_sent(client)
    # The suppressed new address gets no mail: no confirmation can happen.
    assert mails_to(mail_dir, "moved@example.org") == []
    await db.execute("DELETE FROM email_suppressions")
    await client.post("/api/v1/users/me/email", json={"newEmail": "moved@example.org"})
    await mail_sent(client)
    token = link_token(mails_to(mail_dir, "moved@example.org")[0], "/confirm-email")
    await data(await client.post("/api/v1/users/me/email/confirm", json={"token": token}))
    # An invitation to the new address (any case) is now this user's to accept.
    inviter = await factory.user(plan="team", password=None)
    owner = await signed_in(make_client, factory, inviter)
    invited = await data(
        await owner.post(
            f"/api/v1/accounts/{inviter.account_id}/invitations",
            json={"email": "MOVED@example.org", "role": "member"},
        ),
        201,
    )
    accepted = await client.post("/api/v1/invitations/accept", json={"token": invited["token"]})
    assert accepted.status == 200, await accepted.text()


async def test_this_wasnt_me_ends_a_password_and_a_factor_set_while_the_address_was_away(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    """A stolen session changes the address, confirms it, resets the password through the new
    address and adds an authenticator app (their notices go to the new address): the owner's
    cancel link brings the address back and ends that password and that factor, or the
    attacker would sign straight back in. The owner's "Forgot password" reaches them again."""
    user = await factory.user()
    attacker = await signed_in(make_client, factory, user)
    evil = f"evil-{uuid.uuid4().hex[:8]}@example.org"
    await attacker.post("/api/v1/users/me/email", json={"newEmail": evil})
    await mail_sent(attacker)
    confirm = link_token(mails_to(mail_dir, evil)[0], "/confirm-email")
    cancel = link_token(mails_to(mail_dir, user.email)[0], "/cancel-email-change")
    await data(await attacker.post("/api/v1/users/me/email/confirm", json={"token": confirm}))
    anonymous = await make_client()
    await data(await anonymous.post("/api/v1/auth/password-reset/request", json={"email": evil}))
    await mail_sent(anonymous)
    reset = link_token(mails_to(mail_dir, evil)[-1], "/reset-password")
    stolen = "the attacker's own passphrase 7"
    await data(
        await anonymous.post(
            "/api/v1/auth/password-reset/confirm", json={"token": reset, "password": stolen}
        )
    )
    thief = await make_client()
    login = await thief.post("/api/v1/auth/login", json={"email": evil, "password": stolen})
    assert login.status == 200, await login.text()
    await enrol_totp(thief)

    owner = await make_client()
    await data(await owner.post("/api/v1/auth/email-change/cancel", json={"token": cancel}))
    assert await user_email(db, user) == user.email
    for password in (stolen, user.password):  # neither: "Forgot password" is the way back
        await error(
            await thief.post(
                "/api/v1/auth/login", json={"email": user.email, "password": password}
            ),
            401,
        )
    factors = await db.fetch_one(
        "SELECT u.mfa_enabled, (SELECT count(*) FROM mfa_totp t WHERE t.user_id = u.id) AS totp,"
        " (SELECT count(*) FROM mfa_recovery_codes r WHERE r.user_id = u.id) AS codes"
        " FROM users u WHERE u.id = %(u)s",
        {"u": user.id},
    )
    assert factors == {"mfa_enabled": False, "totp": 0, "codes": 0}
    await data(await owner.post("/api/v1/auth/password-reset/request", json={"email": user.email}))
    await mail_sent(owner)
    assert "/reset-password" in mail_text(mails_to(mail_dir, user.email)[-1])
