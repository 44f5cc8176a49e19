"""Issue 25, item 11: line and paragraph separators and control characters (U+2028, U+2029,
U+0085 and the other C1 controls, DEL) are refused in single-line fields, and no mail header
ever fails because of a user's text, also text stored before the rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenantd.email.message import EmailMessage
from tenantd.email.providers.file import build_mime
from tests.auth.helpers import mail_sent
from tests.factories import Factory, read_mails
from tests.helpers import PASSWORD, error
from tests.mfa.helpers import signed_in
from tests.ui.test_mfa_pages import post_form

SEPARATORS = ["\u2028", "\u2029", "\x85", "\x7f", "\x9b", "\x0b", "\x1c"]


@pytest.mark.parametrize("char", SEPARATORS, ids=[f"U+{ord(c):04X}" for c in SEPARATORS])
async def test_names_with_separators_are_refused(
    make_client: Any, factory: Factory, db: Any, settings: Any, char: str
) -> None:
    anonymous = await make_client()
    body = {"email": "ann@corp.example", "password": PASSWORD, "firstName": f"Ann{char}Bee"}
    refused = await error(await anonymous.post("/auth/register", json=body), 422)
    assert refused["code"] == "VALIDATION_ERROR"
    assert "firstName" in refused["details"]["fields"]
    page = await post_form(
        anonymous,
        "/signup",
        "/signup",
        email="ann@corp.example",
        password=PASSWORD,
        lastName=f"Le{char}e",
    )
    assert page.status == 422
    user = await factory.user(password=None)
    client = await signed_in(make_client, db, settings, user)
    await error(await client.post("/api/v1/accounts", json={"name": f"Team{char}X"}), 422)
    assert await db.fetch_val("SELECT count(*) FROM users") == 1


def test_every_subject_and_header_becomes_one_line() -> None:
    hostile = "Team\u2028Evil\r\nBcc: x@evil.example\x85\u2029end"
    message = EmailMessage(
        to="a@corp.example", subject=hostile, text="t", headers={"X-Note": hostile}
    )
    assert message.subject == "Team Evil Bcc: x@evil.example end"
    mime = build_mime(message, sender="n@tenantd.example", message_id="<1@tenantd.example>")
    raw = mime.as_bytes(policy=mime.policy.clone(max_line_length=998))
    assert b"\nBcc:" not in raw


async def test_an_account_name_stored_with_separators_still_sends_its_invitations(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path
) -> None:
    owner = await factory.user(plan="team", password=None)
    await db.execute(
        "UPDATE accounts SET name = %(n)s WHERE id = %(a)s",
        {"n": "Team\u2028Evil\r\nBcc: x@evil.example\x85", "a": owner.account_id},
    )
    client = await signed_in(make_client, db, settings, owner)
    created = await client.post(
        f"/api/v1/accounts/{owner.account_id}/invitations",
        json={"email": "guest@corp.example", "role": "member"},
    )
    assert created.status == 201, await created.text()
    await mail_sent(client)
    [mail] = [m for m in read_mails(mail_dir) if m["To"] == "guest@corp.example"]
    assert mail["Subject"] == "You are invited to join Team Evil Bcc: x@evil.example"
    assert mail["Bcc"] is None


async def test_a_first_name_stored_with_separators_still_gets_its_verification_mail(
    make_client: Any, factory: Factory, db: Any, mail_dir: Path
) -> None:
    user = await factory.user(password=None, verified=False, account=False)
    await db.execute(
        "UPDATE users SET first_name = %(n)s WHERE id = %(u)s", {"n": "Ann\u2028\x85", "u": user.id}
    )
    client = await make_client()
    answer = await client.post("/api/v1/auth/resend-verification", json={"email": user.email})
    assert answer.status == 200
    await mail_sent(client)
    assert [m["To"] for m in read_mails(mail_dir)] == [user.email]
