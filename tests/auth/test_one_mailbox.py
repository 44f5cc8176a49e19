"""Issue 25, item 4: every field that becomes an address is one mailbox in the normal form.

Lists, display names, address literals and stray punctuation are refused (422
VALIDATION_ERROR on the API, the form again on a page, exit 2 on the CLI) at every entry point
that takes an address, and nothing is written or mailed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenantd.addresses import InvalidEmail, canonical_email
from tests.auth.helpers import mail_sent
from tests.factories import Factory, read_mails
from tests.helpers import PASSWORD, error
from tests.mfa.helpers import signed_in
from tests.suppression.test_suppress_cli import cli_env, invoke, table
from tests.ui.test_mfa_pages import post_form

__all__ = ["cli_env"]  # the fixture, imported for the CLI case

HOSTILE = [
    "a@evil.example,b@corp.example",
    "x<v@gmail.com>",
    "Ann <ann@corp.example>",
    "v@gmail.com,",
    "a@[127.0.0.1]",
    "a@127.0.0.1",
    "a@corp.example;b@evil.example",
    '"a,b"@corp.example',
    "a@b@corp.example",
    "a..b@corp.example",
    "a@corp.example>",
    "(comment)a@corp.example",
]


@pytest.mark.parametrize("address", HOSTILE)
def test_the_parser_has_no_normal_form_for_them(address: str) -> None:
    with pytest.raises(InvalidEmail):
        canonical_email(address)


def test_one_mailbox_in_any_spelling_still_parses() -> None:
    assert canonical_email(" Ann.Lee+tag@Exämple.COM. ") == "ann.lee+tag@xn--exmple-cua.com"
    assert canonical_email("o'brien@b_c.example") == "o'brien@b_c.example"


def nothing_mailed(mail_dir: Path) -> None:
    assert [m["To"] for m in read_mails(mail_dir)] == []


async def test_the_api_refuses_them_everywhere(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path
) -> None:
    user = await factory.user(plan="team", password=None)
    client = await signed_in(make_client, db, settings, user)
    anonymous = await make_client()
    for address in HOSTILE:
        cases = [
            (anonymous, "/auth/register", {"email": address, "password": PASSWORD}),
            (anonymous, "/api/v1/auth/resend-verification", {"email": address}),
            (anonymous, "/api/v1/auth/password-reset/request", {"email": address}),
            (client, "/api/v1/users/me/email", {"newEmail": address}),
            (
                client,
                f"/api/v1/accounts/{user.account_id}/invitations",
                {"email": address, "role": "member"},
            ),
        ]
        for browser, path, body in cases:
            await error(await browser.post(path, json=body), 422, "VALIDATION_ERROR")
    await mail_sent(client)
    nothing_mailed(mail_dir)
    assert await db.fetch_val("SELECT count(*) FROM invitations") == 0
    assert await db.fetch_val("SELECT count(*) FROM users") == 1


async def test_the_pages_refuse_them_everywhere(
    make_client: Any, factory: Factory, db: Any, settings: Any, mail_dir: Path
) -> None:
    user = await factory.user(plan="team", password=None)
    client = await signed_in(make_client, db, settings, user)
    anonymous = await make_client()
    members = f"/accounts/{user.account_id}/members"
    for address in HOSTILE:
        cases = [
            (anonymous, "/signup", "/signup", {"email": address, "password": PASSWORD}),
            (anonymous, "/check-inbox?email=x", "/check-inbox", {"email": address}),
            (anonymous, "/reset-password", "/reset-password", {"email": address}),
            (client, "/account", "/account/email", {"newEmail": address}),
            (client, members, members + "/invite", {"email": address, "role": "member"}),
        ]
        for browser, page, action, fields in cases:
            answer = await post_form(browser, page, action, **fields)
            assert answer.status == 422, (action, address, answer.status)
    await mail_sent(client)
    nothing_mailed(mail_dir)
    assert await db.fetch_val("SELECT count(*) FROM invitations") == 0
    assert await db.fetch_val("SELECT count(*) FROM users") == 1


@pytest.mark.parametrize("address", HOSTILE[:6])
def test_the_suppression_cli_refuses_them(
    cli_env: dict[str, str], migrated: str, address: str
) -> None:
    result = invoke(cli_env, "add", address)
    assert result.exit_code == 2, result.output
    assert table(migrated) == []
