"""The HTTP senders against the fake providers: wire formats, retries, error mapping."""

from __future__ import annotations

from dataclasses import replace

import aiohttp
import pytest

from tenantd.app.settings import load_settings
from tenantd.email.message import EmailMessage, EmailSendError, RecipientSuppressed
from tenantd.email.providers.http import build_http_sender
from tenantd.email.providers.postmark import PostmarkSender, inactive_addresses
from tenantd.email.providers.resend import ResendSender
from tenantd.email.providers.retry import RetryPolicy
from tenantd.email.providers.sendgrid import SendGridSender
from tenantd.email.service import build_sender
from tenantd.settings import Settings, SettingsError
from tests.email.fake_providers import (
    POSTMARK_TOKEN,
    RESEND_KEY,
    SENDGRID_KEY,
    FakeProviders,
)
from tests.email.support import Sleeps

SENDER = "tenantd <no-reply@example.com>"
MESSAGE = EmailMessage(
    to="Bob@Example.com",
    subject="Hello",
    text="plain body",
    html="<p>html body</p>",
    headers={"X-Entity-Ref-ID": "abc"},
    tag="comment.created",
)


def postmark(fake: FakeProviders, http: aiohttp.ClientSession, policy: RetryPolicy, **kw: str):
    return PostmarkSender(
        http, token=kw.get("token", POSTMARK_TOKEN), base_url=fake.url, retry=policy
    )


def resend(fake: FakeProviders, http: aiohttp.ClientSession, policy: RetryPolicy, **kw: str):
    return ResendSender(http, api_key=kw.get("key", RESEND_KEY), base_url=fake.url, retry=policy)


def sendgrid(fake: FakeProviders, http: aiohttp.ClientSession, policy: RetryPolicy, **kw: str):
    return SendGridSender(
        http, api_key=kw.get("key", SENDGRID_KEY), base_url=fake.url, retry=policy
    )


BUILDERS = {"postmark": postmark, "resend": resend, "sendgrid": sendgrid}


# --- wire formats ---------------------------------------------------------------------------


async def test_postmark_request_shape(fake, http, policy) -> None:
    message_id = await postmark(fake, http, policy).send(MESSAGE, sender=SENDER)
    [request] = fake.sent("postmark")
    assert request.path == "/email"
    assert request.headers["X-Postmark-Server-Token"] == POSTMARK_TOKEN
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Accept"] == "application/json"
    assert request.json == {
        "From": SENDER,
        "To": "Bob@Example.com",
        "Subject": "Hello",
        "TextBody": "plain body",
        "HtmlBody": "<p>html body</p>",
        "Headers": [{"Name": "X-Entity-Ref-ID", "Value": "abc"}],
        "MessageStream": "outbound",
        "Tag": "comment.created",
    }
    assert message_id and len(message_id) == 36


async def test_resend_request_shape(fake, http, policy) -> None:
    message_id = await resend(fake, http, policy).send(MESSAGE, sender=SENDER)
    [request] = fake.sent("resend")
    assert request.path == "/emails"
    assert request.headers["Authorization"] == f"Bearer {RESEND_KEY}"
    assert request.headers["Idempotency-Key"]
    assert request.json == {
        "from": SENDER,
        "to": ["Bob@Example.com"],
        "subject": "Hello",
        "text": "plain body",
        "html": "<p>html body</p>",
        "headers": {"X-Entity-Ref-ID": "abc"},
        # Resend tags allow only letters, digits, '_' and '-'.
        "tags": [{"name": "category", "value": "comment_created"}],
    }
    assert message_id == fake.resend_idempotency[request.headers["Idempotency-Key"]]


async def test_sendgrid_request_shape(fake, http, policy) -> None:
    message_id = await sendgrid(fake, http, policy).send(MESSAGE, sender=SENDER)
    [request] = fake.sent("sendgrid")
    assert request.path == "/v3/mail/send"
    assert request.headers["Authorization"] == f"Bearer {SENDGRID_KEY}"
    assert request.json == {
        "personalizations": [{"to": [{"email": "Bob@Example.com"}]}],
        "from": {"email": "no-reply@example.com", "name": "tenantd"},
        "subject": "Hello",
        "content": [
            {"type": "text/plain", "value": "plain body"},
            {"type": "text/html", "value": "<p>html body</p>"},
        ],
        "headers": {"X-Entity-Ref-ID": "abc"},
        "categories": ["comment.created"],
    }
    assert message_id and len(message_id) == 22  # the X-Message-Id header of the 202


@pytest.mark.parametrize("provider", sorted(BUILDERS))
async def test_text_only_message(fake, http, policy, provider) -> None:
    sender = BUILDERS[provider](fake, http, policy)
    await sender.send(EmailMessage(to="a@example.com", subject="s", text="t"), sender=SENDER)
    [request] = fake.sent(provider)
    body = request.json
    assert "HtmlBody" not in body and "html" not in body
    assert "Headers" not in body and "headers" not in body


# --- retries --------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", sorted(BUILDERS))
async def test_5xx_is_retried_with_backoff_then_succeeds(
    fake: FakeProviders, http, policy, sleeps: Sleeps, provider: str
) -> None:
    fake.fail(provider, 503, times=2)
    message_id = await BUILDERS[provider](fake, http, policy).send(MESSAGE, sender=SENDER)
    assert message_id
    assert len(fake.sent(provider)) == 3
    assert len(sleeps.delays) == 2
    # Exponential with jitter: the n-th wait is within [base*2^(n-1)/2, base*2^(n-1)].
    assert 0.1 <= sleeps.delays[0] <= 0.2
    assert 0.2 <= sleeps.delays[1] <= 0.4


@pytest.mark.parametrize("provider", sorted(BUILDERS))
async def test_5xx_gives_up_after_the_bounded_attempts(
    fake: FakeProviders, http, policy, sleeps: Sleeps, provider: str
) -> None:
    fake.fail(provider, 500, times=5)
    with pytest.raises(EmailSendError) as raised:
        await BUILDERS[provider](fake, http, policy).send(MESSAGE, sender=SENDER)
    assert raised.value.retryable is True
    assert "HTTP 500" in str(raised.value)
    assert len(fake.sent(provider)) == 3
    assert len(sleeps.delays) == 2


@pytest.mark.parametrize("provider", sorted(BUILDERS))
async def test_connection_errors_are_retried(
    fake: FakeProviders, http, policy, provider: str
) -> None:
    fake.drop(provider, times=2)
    assert await BUILDERS[provider](fake, http, policy).send(MESSAGE, sender=SENDER)
    assert len(fake.sent(provider)) == 3


async def test_connection_refused_is_retryable_after_attempts(http, sleeps: Sleeps) -> None:
    sender = PostmarkSender(
        http,
        token=POSTMARK_TOKEN,
        base_url="http://127.0.0.1:9",  # discard port: nothing listens
        retry=RetryPolicy(attempts=2, base_delay=0.01, timeout=2.0, sleep=sleeps),
    )
    with pytest.raises(EmailSendError) as raised:
        await sender.send(MESSAGE, sender=SENDER)
    assert raised.value.retryable is True
    assert "transport error" in str(raised.value)
    assert len(sleeps.delays) == 1


async def test_per_request_timeout_is_retried(fake: FakeProviders, http, sleeps: Sleeps) -> None:
    release = fake.hold("sendgrid")  # the first attempt is never answered: only its timeout ends it
    try:
        policy = RetryPolicy(attempts=2, base_delay=0.01, timeout=2.0, sleep=sleeps)
        assert await sendgrid(fake, http, policy).send(MESSAGE, sender=SENDER)
    finally:
        release.set()
    assert len(fake.sent("sendgrid")) == 2


async def test_resend_retries_reuse_the_idempotency_key(fake: FakeProviders, http, policy) -> None:
    fake.fail("resend", 502, times=2)
    await resend(fake, http, policy).send(MESSAGE, sender=SENDER)
    keys = {r.headers["Idempotency-Key"] for r in fake.sent("resend")}
    assert len(fake.sent("resend")) == 3 and len(keys) == 1
    await resend(fake, http, policy).send(MESSAGE, sender=SENDER)
    assert len({r.headers["Idempotency-Key"] for r in fake.sent("resend")}) == 2


async def test_resend_sends_the_message_key_so_a_second_send_is_not_delivered(
    fake: FakeProviders, http, policy
) -> None:
    message = replace(MESSAGE, idempotency_key="notification/42/email")
    first = await resend(fake, http, policy).send(message, sender=SENDER)
    second = await resend(fake, http, policy).send(message, sender=SENDER)
    assert [r.headers["Idempotency-Key"] for r in fake.sent("resend")] == [
        "notification/42/email",
        "notification/42/email",
    ]
    assert first == second
    assert len(fake.delivered) == 1


async def test_resend_key_already_used_for_another_body_counts_as_sent(
    fake: FakeProviders, http, policy, caplog: pytest.LogCaptureFixture
) -> None:
    message = replace(MESSAGE, idempotency_key="notification/43/email")
    assert await resend(fake, http, policy).send(message, sender=SENDER)
    changed = replace(message, text="rendered again after a deploy")
    assert await resend(fake, http, policy).send(changed, sender=SENDER) is None
    assert len(fake.delivered) == 1
    assert "already sent under this idempotency key" in caplog.text


async def test_resend_key_in_flight_is_retryable(fake: FakeProviders, http, policy) -> None:
    body = {
        "statusCode": 409,
        "message": "Same idempotency key used while original request is still in progress.",
        "name": "concurrent_idempotent_requests",
    }
    fake.fail("resend", 409, body=body)
    message = replace(MESSAGE, idempotency_key="notification/44/email")
    with pytest.raises(EmailSendError) as raised:
        await resend(fake, http, policy).send(message, sender=SENDER)
    assert raised.value.retryable is True
    assert fake.delivered == []


@pytest.mark.parametrize("provider", ["postmark", "sendgrid"])
async def test_providers_without_idempotency_keys_get_no_such_header(
    fake: FakeProviders, http, policy, provider: str
) -> None:
    message = replace(MESSAGE, idempotency_key="notification/45/email")
    await BUILDERS[provider](fake, http, policy).send(message, sender=SENDER)
    [request] = fake.sent(provider)
    assert "Idempotency-Key" not in request.headers


@pytest.mark.parametrize(
    ("provider", "status", "body"),
    [
        ("postmark", 422, {"ErrorCode": 300, "Message": "Invalid 'From' address: 'x'."}),
        ("postmark", 400, {"ErrorCode": 402, "Message": "Received invalid JSON input."}),
        ("resend", 422, {"statusCode": 422, "message": "Invalid `to`", "name": "validation_error"}),
        ("resend", 403, {"statusCode": 403, "message": "Forbidden", "name": "invalid_api_key"}),
        ("sendgrid", 400, {"errors": [{"message": "bad from", "field": "from", "help": None}]}),
        ("sendgrid", 413, {"errors": [{"message": "too big", "field": None, "help": None}]}),
    ],
)
async def test_4xx_is_never_retried(
    fake: FakeProviders, http, policy, sleeps: Sleeps, provider: str, status: int, body: dict
) -> None:
    fake.fail(provider, status, body=body)
    with pytest.raises(EmailSendError) as raised:
        await BUILDERS[provider](fake, http, policy).send(MESSAGE, sender=SENDER)
    assert raised.value.retryable is False
    assert f"HTTP {status}" in str(raised.value)
    assert len(fake.sent(provider)) == 1
    assert sleeps.delays == []


@pytest.mark.parametrize("provider", sorted(BUILDERS))
async def test_429_is_not_retried_inline_but_marked_retryable(
    fake: FakeProviders, http, policy, provider: str
) -> None:
    fake.fail(provider, 429, body={"message": "rate limited"})
    with pytest.raises(EmailSendError) as raised:
        await BUILDERS[provider](fake, http, policy).send(MESSAGE, sender=SENDER)
    assert raised.value.retryable is True
    assert len(fake.sent(provider)) == 1


@pytest.mark.parametrize("provider", sorted(BUILDERS))
async def test_wrong_key_is_refused_and_the_key_never_appears_in_the_error(
    fake: FakeProviders, http, policy, provider: str
) -> None:
    secret = "wrong-secret-value-XYZ"
    sender = BUILDERS[provider](fake, http, policy, token=secret, key=secret)
    with pytest.raises(EmailSendError) as raised:
        await sender.send(MESSAGE, sender=SENDER)
    assert raised.value.retryable is False
    assert secret not in str(raised.value)
    assert len(fake.sent(provider)) == 1


# --- Postmark 406 ---------------------------------------------------------------------------


async def test_postmark_406_raises_recipient_suppressed_with_parsed_addresses(
    fake: FakeProviders, http, policy
) -> None:
    fake.postmark_inactive("a@b.com", "C@D.com")
    with pytest.raises(RecipientSuppressed) as raised:
        await postmark(fake, http, policy).send(MESSAGE, sender=SENDER)
    assert raised.value.addresses == ["a@b.com", "c@d.com"]
    assert (raised.value.reason, raised.value.provider) == ("inactive", "postmark")
    assert len(fake.sent("postmark")) == 1


async def test_postmark_406_without_a_parsable_list_falls_back_to_the_recipient(
    fake: FakeProviders, http, policy
) -> None:
    fake.postmark_inactive(message="You tried to send to recipient(s) marked as inactive.")
    with pytest.raises(RecipientSuppressed) as raised:
        await postmark(fake, http, policy).send(MESSAGE, sender=SENDER)
    assert raised.value.addresses == ["bob@example.com"]


def test_inactive_addresses_parser() -> None:
    real = (
        "You tried to send to recipient(s) that have been marked as inactive. Found inactive "
        "addresses: a@b.com, c@d.com. Inactive recipients are ones that have generated a hard "
        "bounce, a spam complaint, or a manual suppression."
    )
    assert inactive_addresses(real) == ["a@b.com", "c@d.com"]
    assert inactive_addresses("Found inactive address: x.y@mail.example.co.uk.") == [
        "x.y@mail.example.co.uk"
    ]
    assert inactive_addresses("Found inactive addresses: a@b.com, a@B.COM") == ["a@b.com"]
    assert inactive_addresses("something else entirely") == []


# --- selection by EMAIL_PROVIDER ------------------------------------------------------------


def _settings(env: dict[str, str], **extra: str) -> Settings:
    return load_settings(environ={**env, **extra})


@pytest.mark.parametrize(
    ("provider", "variable", "cls"),
    [
        ("postmark", "POSTMARK_SERVER_TOKEN", PostmarkSender),
        ("resend", "RESEND_API_KEY", ResendSender),
        ("sendgrid", "SENDGRID_API_KEY", SendGridSender),
    ],
)
async def test_email_provider_selects_the_sender_and_requires_its_key(
    env: dict[str, str], http, provider: str, variable: str, cls: type
) -> None:
    configured = _settings(env, EMAIL_PROVIDER=provider, **{variable: "k"})
    assert isinstance(build_sender(configured, http), cls)
    with pytest.raises(SettingsError, match=variable):
        build_sender(_settings(env, EMAIL_PROVIDER=provider), http)


async def test_base_urls_come_from_settings(env: dict[str, str], http) -> None:
    configured = _settings(
        env,
        EMAIL_PROVIDER="sendgrid",
        SENDGRID_API_KEY="k",
        SENDGRID_API_URL="http://127.0.0.1:1234/",
    )
    sender = build_http_sender(configured, http)
    assert isinstance(sender, SendGridSender)
    assert sender.url == "http://127.0.0.1:1234/v3/mail/send"


async def test_missing_key_stops_app_start_up(start, env: dict[str, str]) -> None:
    with pytest.raises(SettingsError, match="POSTMARK_SERVER_TOKEN"):
        await start(EMAIL_PROVIDER="postmark")


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("RESEND_WEBHOOK_SECRET", "whsec_***not base64***"),
        ("RESEND_WEBHOOK_SECRET", "whsec_"),
        ("SENDGRID_WEBHOOK_PUBLIC_KEY", "not a key"),
        (
            "SENDGRID_WEBHOOK_PUBLIC_KEY",
            "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----",
        ),
    ],
)
async def test_unusable_webhook_secrets_stop_app_start_up(start, variable: str, value: str) -> None:
    with pytest.raises(SettingsError, match=variable):
        await start(**{variable: value})
