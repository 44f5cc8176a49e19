"""The SMTP provider against a real SMTP server (aiosmtpd): plain relay, STARTTLS with a
generated certificate and AUTH, implicit TLS, permanent and transient recipient refusals."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tenantd.app.settings import load_settings
from tenantd.db import Database
from tenantd.email.message import EmailMessage, EmailSendError
from tenantd.email.providers.retry import RetryPolicy
from tenantd.email.providers.smtp import SmtpSender, is_permanent_address_refusal, parse_url
from tenantd.email.service import EmailService, build_sender
from tenantd.settings import SettingsError
from tenantd.suppression import service as suppression
from tests.email.fake_smtp import PASSWORD, USER, FakeSmtp
from tests.email.support import Sleeps

SENDER = "tenantd <no-reply@example.com>"


def message(to: str = "bob@example.com") -> EmailMessage:
    return EmailMessage(
        to=to,
        subject="Hello",
        text="plain body",
        html="<p>html body</p>",
        headers={"X-Entity-Ref-ID": "abc"},
        tag="comment.created",
    )


def sender(
    url: str, policy: RetryPolicy, *, starttls: bool = True, ca: Path | None = None
) -> SmtpSender:
    return SmtpSender(
        parse_url(url),
        starttls=starttls,
        ca_file=str(ca) if ca else None,
        retry=policy,
        local_hostname="tenantd.test",
    )


async def test_plain_relay_delivers_the_mime_message(tmp_path: Path, policy: RetryPolicy) -> None:
    with FakeSmtp(tmp_path) as smtp:
        smtp_sender = sender(f"smtp://127.0.0.1:{smtp.port}", policy, starttls=False)
        message_id = await smtp_sender.send(message(), sender=SENDER)
    [got] = smtp.received
    assert got.recipients == ["bob@example.com"]
    assert got.sender == "no-reply@example.com"
    assert not got.tls and got.login is None
    assert got.message["Subject"] == "Hello"
    assert got.message["X-Entity-Ref-ID"] == "abc"
    assert got.message["Message-ID"] == message_id
    parts = {p.get_content_type(): p.get_payload(decode=True) for p in got.message.walk()}
    assert parts["text/plain"].strip() == b"plain body"
    assert parts["text/html"].strip() == b"<p>html body</p>"


async def test_starttls_with_auth_and_a_private_ca(tmp_path: Path, policy: RetryPolicy) -> None:
    with FakeSmtp(tmp_path, mode="starttls") as smtp:
        url = f"smtp://{USER}:{PASSWORD}@127.0.0.1:{smtp.port}"
        await sender(url, policy, ca=smtp.cert).send(message(), sender=SENDER)
    [got] = smtp.received
    assert got.tls and got.login == USER


async def test_starttls_is_the_default_and_never_downgrades(
    tmp_path: Path, policy: RetryPolicy
) -> None:
    with FakeSmtp(tmp_path) as smtp, pytest.raises(EmailSendError) as refused:  # no STARTTLS
        await sender(f"smtp://127.0.0.1:{smtp.port}", policy).send(message(), sender=SENDER)
    assert refused.value.retryable is False
    assert "STARTTLS" in str(refused.value)
    assert smtp.received == []


async def test_an_untrusted_certificate_is_refused(tmp_path: Path, policy: RetryPolicy) -> None:
    with FakeSmtp(tmp_path, mode="starttls") as smtp:
        url = f"smtp://{USER}:{PASSWORD}@127.0.0.1:{smtp.port}"
        with pytest.raises(EmailSendError):
            await sender(url, policy).send(message(), sender=SENDER)  # no SMTP_CA_FILE
    assert smtp.received == []
    assert smtp.handler.logins == []  # the password never left before TLS was verified


async def test_implicit_tls_smtps(tmp_path: Path, policy: RetryPolicy) -> None:
    with FakeSmtp(tmp_path, mode="tls") as smtp:
        url = f"smtps://{USER}:{PASSWORD}@127.0.0.1:{smtp.port}"
        await sender(url, policy, ca=smtp.cert).send(message(), sender=SENDER)
    [got] = smtp.received
    assert got.tls and got.login == USER


async def test_wrong_password_fails_without_retry_and_never_shows_the_password(
    tmp_path: Path, policy: RetryPolicy, sleeps: Sleeps, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    wrong = "wr0ng-and-secret"
    with FakeSmtp(tmp_path, mode="starttls") as smtp:
        smtp_sender = sender(f"smtp://{USER}:{wrong}@127.0.0.1:{smtp.port}", policy, ca=smtp.cert)
        with pytest.raises(EmailSendError) as refused:
            await smtp_sender.send(message(), sender=SENDER)
    assert refused.value.retryable is False
    assert set(smtp.handler.logins) == {(USER, wrong)}  # each offered mechanism once
    assert sleeps.delays == []
    assert wrong not in str(refused.value) and wrong not in repr(smtp_sender.target)
    assert wrong not in caplog.text


async def test_a_permanent_address_refusal_is_mirrored_into_the_suppression_list(
    tmp_path: Path, policy: RetryPolicy, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with FakeSmtp(tmp_path, mode="starttls") as smtp:
        url = f"smtp://{USER}:{PASSWORD}@127.0.0.1:{smtp.port}"
        service = EmailService(
            db=db,
            sender=sender(url, policy, ca=smtp.cert),
            sender_address=SENDER,
            blocklist=suppression,
        )
        result = await service.send(message("Gone@Example.com"))
        assert (result.status, result.reason) == ("suppressed", "hard_bounce")
        again = await service.send(message("gone@example.com"))
        assert again.status == "suppressed"
        assert smtp.handler.rcpt_attempts == ["Gone@Example.com"]  # second send skipped SMTP
    rows = await db.fetch_all("SELECT email, reason, provider FROM email_suppressions")
    assert rows == [{"email": "gone@example.com", "reason": "hard_bounce", "provider": "smtp"}]
    assert PASSWORD not in caplog.text


async def test_a_policy_refusal_fails_without_suppressing(
    tmp_path: Path, policy: RetryPolicy, db: Database
) -> None:
    with FakeSmtp(tmp_path) as smtp:
        service = EmailService(
            db=db,
            sender=sender(f"smtp://127.0.0.1:{smtp.port}", policy, starttls=False),
            sender_address=SENDER,
            blocklist=suppression,
        )
        with pytest.raises(EmailSendError) as refused:
            await service.send(message("blocked@example.com"))
    assert refused.value.retryable is False
    assert "5.7.1" in str(refused.value)
    assert await db.fetch_all("SELECT email FROM email_suppressions") == []


async def test_a_transient_refusal_is_retried(
    tmp_path: Path, policy: RetryPolicy, sleeps: Sleeps
) -> None:
    with FakeSmtp(tmp_path, busy_refusals=1) as smtp:
        smtp_sender = sender(f"smtp://127.0.0.1:{smtp.port}", policy, starttls=False)
        await smtp_sender.send(message("busy@example.com"), sender=SENDER)
    assert smtp.handler.rcpt_attempts == ["busy@example.com"] * 2
    assert len(sleeps.delays) == 1
    assert [r.recipients for r in smtp.received] == [["busy@example.com"]]


async def test_transient_refusals_past_the_tries_are_left_to_the_job_queue(
    tmp_path: Path, policy: RetryPolicy, db: Database
) -> None:
    with FakeSmtp(tmp_path, busy_refusals=10) as smtp:
        smtp_sender = sender(f"smtp://127.0.0.1:{smtp.port}", policy, starttls=False)
        with pytest.raises(EmailSendError) as refused:
            await smtp_sender.send(message("busy@example.com"), sender=SENDER)
    assert refused.value.retryable is True
    assert "451" in str(refused.value)
    assert len(smtp.handler.rcpt_attempts) == policy.attempts
    assert await db.fetch_all("SELECT email FROM email_suppressions") == []


async def test_a_dead_server_is_a_retryable_failure(tmp_path: Path, policy: RetryPolicy) -> None:
    with FakeSmtp(tmp_path) as smtp:
        port = smtp.port
    with pytest.raises(EmailSendError) as refused:
        await sender(f"smtp://127.0.0.1:{port}", policy, starttls=False).send(
            message(), sender=SENDER
        )
    assert refused.value.retryable is True


@pytest.mark.parametrize(
    ("code", "text", "permanent"),
    [
        (550, "5.1.1 User unknown", True),
        (550, "5.1.10 Null MX", True),
        (553, "5.1.3 Bad address syntax", True),
        (550, "5.2.1 Mailbox disabled", True),
        (551, "User not local", True),
        (550, "No such user", True),
        (550, "5.7.1 Relaying denied", False),
        (552, "5.2.2 Mailbox full", False),
        (554, "Transaction failed", False),
        (450, "4.1.1 Try later", False),
        (451, "4.3.0 Try later", False),
    ],
)
def test_which_refusals_are_permanent(code: int, text: str, permanent: bool) -> None:
    assert is_permanent_address_refusal(code, text) is permanent


def test_smtp_url_parsing() -> None:
    target = parse_url("smtp://ses%2Buser:p%40ss@email-smtp.eu-west-1.amazonaws.com")
    assert (target.host, target.port, target.implicit_tls) == (
        "email-smtp.eu-west-1.amazonaws.com",
        587,
        False,
    )
    assert (target.username, target.password) == ("ses+user", "p@ss")
    assert "p@ss" not in repr(target)
    assert parse_url("smtps://h").port == 465
    assert parse_url("smtp://relay:25").username is None
    for bad in (
        "http://u:secretpw@h",
        "smtp://u:secretpw@",
        "smtp://:secretpw@h",
        "smtp://u:secretpw@h:notaport",
    ):
        with pytest.raises(ValueError) as refused:
            parse_url(bad)
        assert "secretpw" not in str(refused.value)


async def test_settings_choose_the_smtp_sender(tmp_path: Path, env: dict[str, str]) -> None:
    base = {**env, "EMAIL_PROVIDER": "smtp"}
    with pytest.raises(SettingsError, match="SMTP_URL"):
        build_sender(load_settings(environ=base), http=None)  # type: ignore[arg-type]
    settings = load_settings(
        environ={**base, "SMTP_URL": "smtp://u:pw@relay:2525", "SMTP_STARTTLS": "false"}
    )
    built: Any = build_sender(settings, http=None)  # type: ignore[arg-type]
    assert isinstance(built, SmtpSender)
    assert (built.target.host, built.target.port, built.starttls) == ("relay", 2525, False)
    assert "pw" not in repr(settings)
    assert load_settings(environ={**base, "SMTP_URL": "smtp://h"}).mail.smtp_starttls is True
