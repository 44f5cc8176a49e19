"""The suppression list's rules: one normalisation everywhere, insert no-op, removal."""

from __future__ import annotations

import asyncio

import pytest

from tenantd.addresses import InvalidEmail, canonical_email, is_plausible, normalize_email
from tenantd.db import Database
from tenantd.email.message import EmailMessage
from tenantd.email.providers.file import FileSender
from tenantd.email.service import EmailService
from tenantd.suppression import service as suppression
from tests.factories import read_mails


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("  Bob@Example.COM \n", "bob@example.com"),
        ("bob@example.com", "bob@example.com"),
        ("BOB@EXAMPLE.COM", "bob@example.com"),  # one form: the local part is lower-cased too
        ("DAVE@X.", "dave@x"),  # no trailing dot
        ("dave@example.com..", "dave@example.com"),
        ("Alice@Exämple.com.", "alice@xn--exmple-cua.com"),  # IDNA (punycode) domain
        ("alice@XN--EXMPLE-CUA.COM", "alice@xn--exmple-cua.com"),
        ("a@ÉXAMPLE\uff0eCOM\u3002", "a@xn--xample-9ua.com"),  # UTS 46 maps case and dots
        ("x@under_score.example", "x@under_score.example"),  # ASCII names stay as they are
        ('"a@b"@Example.org', '"a@b"@example.org'),  # the domain is after the last @
        # No normal form: still folded as far as it goes (and refused by is_plausible).
        ("A@Ex\u200dample.COM.", "a@ex\u200dample.com"),
        ("no-at-sign", "no-at-sign"),
    ],
)
def test_normalize_email(raw: str, normal: str) -> None:
    assert normalize_email(raw) == normal
    assert normalize_email(normal) == normal


@pytest.mark.parametrize(
    "hostile",
    [
        "",
        "no-at-sign",
        "@example.com",  # empty local part
        "  @example.com",
        "a@",
        "a@.",
        "a@exa..mple.com",
        "a@ex\u200dample.com",  # a joiner IDNA refuses
        "a@\u0000.com",
        "a b@example.com",
        "a@" + "x" * 400 + ".com",
    ],
)
def test_canonical_email_refuses_what_has_no_normal_form(hostile: str) -> None:
    with pytest.raises(InvalidEmail) as refused:
        canonical_email(hostile)
    # The API answers it with a 422 VALIDATION_ERROR on the email field (test_normal_form).
    assert refused.value.reason


@pytest.mark.parametrize(
    ("address", "plausible"),
    [
        ("a@b.c", True),
        ("", False),
        ("no-at-sign", False),
        ("@example.com", False),
        ("a@", False),
        ("a b@example.com", False),
        ("a@exa\x00mple.com", False),
        ("a" * 320 + "@example.com", False),
    ],
)
def test_is_plausible(address: str, plausible: bool) -> None:
    assert is_plausible(address) is plausible


async def test_find_add_remove_share_one_normalisation(db: Database) -> None:
    async with db.connection() as conn:
        assert await suppression.add(conn, "  Foo@EXAMPLE.com ", reason="manual", provider="manual")
        assert (await suppression.find(conn, "Foo@example.COM"))["email"] == "foo@example.com"
        assert (await suppression.find(conn, "FOO@example.com."))["email"] == "foo@example.com"
        # What verify-email does for a verified signup: the row goes, whatever the spelling.
        assert await suppression.remove(conn, "fOO@Example.Com.  ") is True
        assert await suppression.find(conn, "foo@example.com") is None
        assert await suppression.remove(conn, "Foo@example.com") is False


async def test_insert_is_a_no_op_when_a_row_exists(db: Database) -> None:
    async with db.connection() as conn:
        assert await suppression.add(conn, "x@example.com", reason="complaint", provider="resend")
        assert not await suppression.add(conn, "x@EXAMPLE.com ", reason="manual", provider="manual")
        recorded = await suppression.add_many(
            conn,
            [("x@Example.com", "dropped", {}), ("y@example.com", "hard_bounce", {})],
            provider="sendgrid",
        )
    assert recorded == [{"email": "y@example.com", "reason": "hard_bounce"}]
    rows = await db.fetch_all("SELECT email, reason, provider FROM email_suppressions ORDER BY 1")
    assert rows == [
        {"email": "x@example.com", "reason": "complaint", "provider": "resend"},
        {"email": "y@example.com", "reason": "hard_bounce", "provider": "sendgrid"},
    ]


async def test_add_many_first_verdict_wins_within_a_batch(db: Database) -> None:
    async with db.connection() as conn:
        recorded = await suppression.add_many(
            conn,
            [("z@example.com", "complaint", {}), (" z@EXAMPLE.com", "dropped", {})],
            provider="sendgrid",
        )
    assert recorded == [{"email": "z@example.com", "reason": "complaint"}]


async def test_concurrent_inserts_of_one_address_leave_one_row(db: Database) -> None:
    async def one(i: int) -> bool:
        async with db.connection() as conn:
            return await suppression.add(
                conn, f"  Same@Example.com{' ' * (i % 3)}", reason="manual", provider="manual"
            )

    results = await asyncio.gather(*(one(i) for i in range(5)))
    assert sorted(results) == [False] * 4 + [True]
    assert await db.fetch_val("SELECT count(*) FROM email_suppressions") == 1


async def test_service_checks_the_list_with_the_same_normalisation(db: Database, tmp_path) -> None:
    service = EmailService(
        db=db, sender=FileSender(tmp_path), sender_address="t <t@localhost>", blocklist=suppression
    )
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider)"
        " VALUES ('ann@example.com', 'hard_bounce', 'resend')"
    )
    for to in (" Ann@EXAMPLE.com", "ann@example.com.", "ANN@Example.Com"):
        result = await service.send(EmailMessage(to=to, subject="s", text="t"))
        assert (result.status, result.reason) == ("suppressed", "hard_bounce")
    assert read_mails(tmp_path) == []
    sent = await service.send(EmailMessage(to="anne@example.com", subject="s", text="t"))
    assert sent.status == "sent" and len(read_mails(tmp_path)) == 1
