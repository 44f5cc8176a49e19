"""One normal form for email addresses across suppression, sign-up, webhooks and the migration
that folds rows written before it (sql/0093_email_normal_form.sql)."""

from __future__ import annotations

import datetime as dt
import re
import sys
from pathlib import Path
from typing import Any

import idna
import pytest

from tenantd.addresses import (
    _UNSAFE,
    InvalidEmail,
    canonical_email,
    is_plausible,
    normalize_email,
)
from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.db.migrate import sql_dir
from tenantd.email.message import EmailMessage
from tests.email.support import Start
from tests.factories import mail_text, read_mails
from tests.suppression.test_resend_webhook import SECRET as RESEND_SECRET
from tests.suppression.test_resend_webhook import URL as RESEND_URL
from tests.suppression.test_resend_webhook import event, svix_headers

PASSWORD = "a long enough passphrase"
TOKEN = re.compile(r"/verify-email\?token=([\w-]+)")


async def rows(db: Database) -> list[dict[str, Any]]:
    return await db.fetch_all(
        "SELECT email, reason, provider FROM email_suppressions ORDER BY email"
    )


async def test_a_differently_spelt_address_is_suppressed_on_the_send_path(
    start: Start, db: Database, mail_dir: Path
) -> None:
    client = await start()
    email = client.server.app[DOMAINS].email
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider)"
        " VALUES ('dave@x.example', 'complaint', 'sendgrid')"
    )
    for to in ("Dave@x.example", "DAVE@X.EXAMPLE.", "dave@X.Example"):
        result = await email.send(EmailMessage(to=to, subject="s", text="t"))
        assert (result.status, result.reason) == ("suppressed", "complaint"), to
    assert read_mails(mail_dir) == []


async def test_webhook_verdict_for_a_trailing_dot_spelling_suppresses_the_address(
    start: Start, db: Database, mail_dir: Path
) -> None:
    client = await start(RESEND_WEBHOOK_SECRET=RESEND_SECRET)
    body = event("email.bounced", "DAVE@X.EXAMPLE.", "Eve@Exämple.COM")
    response = await client.post(RESEND_URL, data=body, headers=svix_headers(body))
    assert response.status == 200, await response.text()
    assert await rows(db) == [
        {"email": "dave@x.example", "reason": "hard_bounce", "provider": "resend"},
        {"email": "eve@xn--exmple-cua.com", "reason": "hard_bounce", "provider": "resend"},
    ]
    email = client.server.app[DOMAINS].email
    for to in ("dave@x.example", "eve@xn--exmple-cua.com"):
        result = await email.send(EmailMessage(to=to, subject="s", text="t"))
        assert result.status == "suppressed", to
    assert read_mails(mail_dir) == []


async def test_verification_clears_the_row_of_the_folded_address(
    start: Start, db: Database, mail_dir: Path
) -> None:
    browser = await start()
    registered = await browser.post(
        "/auth/register", json={"email": "Carol@Example.COM", "password": PASSWORD}
    )
    assert registered.status == 200, await registered.text()
    (message,) = read_mails(mail_dir)
    assert message["To"] == "carol@example.com"
    token = TOKEN.search(mail_text(message))
    assert token is not None
    # A complaint arrives after the link was mailed (recorded in the one normal form).
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider)"
        " VALUES ('carol@example.com', 'complaint', 'sendgrid')"
    )
    verified = await browser.post("/auth/verify-email", json={"token": token.group(1)})
    assert verified.status == 200, await verified.text()
    assert await rows(db) == []


async def test_spellings_of_one_address_are_one_user_and_bad_ones_a_clean_422(
    start: Start, db: Database
) -> None:
    browser = await start()
    for spelling in ("frank@exämple.com", "FRANK@xn--exmple-cua.com", "Frank@EXÄMPLE.com"):
        response = await browser.post(
            "/auth/register", json={"email": spelling, "password": PASSWORD}
        )
        assert response.status == 200, (spelling, await response.text())
    assert await db.fetch_all("SELECT email FROM users") == [{"email": "frank@xn--exmple-cua.com"}]
    hostile = [
        "@exämple.com",  # empty local part
        "a@ex\u200dample.com",  # a joiner IDNA refuses
        "a@xn--zz.com",  # an A-label that decodes to nothing valid
        "a@exämple..com",
        "a@exämple.com,",  # a list, punctuation, a literal: never one mailbox (issue 25)
        "a@[127.0.0.1]",
        "a\u0000@example.com",
        "a@-exämple.com",
    ]
    for email in hostile:
        response = await browser.post("/auth/register", json={"email": email, "password": PASSWORD})
        body = await response.json()
        assert response.status == 422, (email, body)
        assert body["error"]["code"] == "VALIDATION_ERROR"
    assert await db.fetch_val("SELECT count(*) FROM users") == 1


async def test_migration_folds_rows_written_before_it_and_keeps_the_oldest(db: Database) -> None:
    """Rows as the old code stored them (local part's case kept, trailing dots), then 0093."""
    now = dt.datetime.now(dt.UTC)
    old_rows = [
        ("Dave@x.example", "complaint", "sendgrid", now - dt.timedelta(days=3)),
        ("dave@x.example", "manual", "manual", now - dt.timedelta(days=2)),
        ("DAVE@X.EXAMPLE.", "hard_bounce", "resend", now - dt.timedelta(days=1)),
        ("eve@y.example.", "dropped", "sendgrid", now - dt.timedelta(days=5)),
        # The already-folded row wins a tie on created_at.
        ("Tie@z.example", "complaint", "resend", now - dt.timedelta(days=4)),
        ("tie@z.example", "hard_bounce", "sendgrid", now - dt.timedelta(days=4)),
        ("ok@z.example", "manual", "manual", now),
        # SQL has no IDNA: a Unicode domain stays, and the query docs/email.md gives finds it.
        ("zoe@exämple.com", "complaint", "resend", now),
    ]
    for email, reason, provider, created_at in old_rows:
        await db.execute(
            "INSERT INTO email_suppressions (email, reason, provider, created_at)"
            " VALUES (%(e)s, %(r)s, %(p)s, %(c)s)",
            {"e": email, "r": reason, "p": provider, "c": created_at},
        )
    await db.execute(
        "INSERT INTO users (email) VALUES ('Alice@Example.org.'), ('Bob@w.example.'),"
        " ('bob@w.example'), ('Carl@Example.org')"
    )
    migration = next(sql_dir().glob("0093_*.sql")).read_text()
    async with db.connection() as conn:
        await conn.execute(migration)
    assert await db.fetch_all(
        "SELECT email, reason, provider, created_at FROM email_suppressions ORDER BY email"
    ) == [
        {"email": e, "reason": r, "provider": p, "created_at": c}
        for e, r, p, c in [
            ("dave@x.example", "complaint", "sendgrid", now - dt.timedelta(days=3)),
            ("eve@y.example", "dropped", "sendgrid", now - dt.timedelta(days=5)),
            ("ok@z.example", "manual", "manual", now),
            ("tie@z.example", "hard_bounce", "sendgrid", now - dt.timedelta(days=4)),
            ("zoe@exämple.com", "complaint", "resend", now),
        ]
    ]
    assert await db.fetch_all(
        "SELECT email FROM email_suppressions WHERE email !~ '^[[:ascii:]]*$'"
    ) == [{"email": "zoe@exämple.com"}]
    # Users fold too, except two that would become one address (an operator's decision).
    users = await db.fetch_all("SELECT email FROM users")
    assert sorted(u["email"] for u in users) == [
        "Bob@w.example.",
        "alice@example.org",
        "bob@w.example",
        "carl@example.org",
    ]
    # Running it again changes nothing.
    async with db.connection() as conn:
        await conn.execute(migration)
    assert await db.fetch_val("SELECT count(*) FROM email_suppressions") == 5


def test_the_unsafe_character_search_is_the_per_character_rule_on_every_code_point() -> None:
    # addresses._UNSAFE replaced `ch.isspace() or ord(ch) < 32 or ord(ch) == 127` per char.
    for code in range(sys.maxunicode + 1):
        ch = chr(code)
        rule = ch.isspace() or code < 32 or code == 127
        assert (_UNSAFE.search(ch) is not None) is rule, hex(code)
        assert is_plausible(f"a{ch}b@x.example") is not rule, hex(code)


def test_ascii_domains_skip_uts46_because_it_only_lower_cases_ascii() -> None:
    # The premise of _ascii_domain's shortcut, on every ASCII character, alone and in a name.
    for code in range(128):
        ch = chr(code)
        for name in (ch, f"a{ch}b", f"X{ch}.Example"):
            assert idna.uts46_remap(name, std3_rules=False, transitional=False) == name.lower()


def test_the_normal_form_is_unchanged_by_the_shortcuts() -> None:
    # The same answers as the UTS 46 route, hit or miss of the domain memo, and bad input
    # still refused every time (a refusal is never remembered).
    for _ in range(2):
        assert normalize_email(" Dave@X.Example. ") == "dave@x.example"
        assert normalize_email("Eve@Exämple.COM") == "eve@xn--exmple-cua.com"
        assert normalize_email("a@XN--EXMPLE-CUA.com") == "a@xn--exmple-cua.com"
        assert normalize_email("a@b_c.Example") == "a@b_c.example"
        for bad in ("a@xn--zz.example", "a@x..example", "a@.", "a b@x.example", "a@x\x00.ex"):
            with pytest.raises(InvalidEmail):
                canonical_email(bad)
        assert normalize_email("A@XN--ZZ.Example.") == "a@xn--zz.example"
        assert not is_plausible(normalize_email("a@x\x7f.example"))
