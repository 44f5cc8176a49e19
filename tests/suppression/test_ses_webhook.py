"""POST /api/v1/webhooks/ses: Amazon SNS deliveries of SES notifications. Messages are signed
here with `cryptography` the way SNS signs them (SignatureVersion 1 SHA-1, 2 SHA-256); the
certificate is a generated one served by a local fake Amazon, reached only after the
`https://sns.<region>.amazonaws.com` check passed; a foreign certificate URL is never fetched."""

from __future__ import annotations

import base64
import datetime
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from tenantd.app.factory import create_app
from tenantd.app.settings import load_settings
from tenantd.db import Database
from tenantd.suppression.webhooks.ses import SNS_CERTIFICATES, SnsCertificates
from tests.helpers import error

URL = "/api/v1/webhooks/ses"
TOPIC = "arn:aws:sns:us-east-1:123456789012:ses-feedback"
CERT_URL = "https://sns.us-east-1.amazonaws.com/SimpleNotificationService-0123456789abcdef.pem"
SUBSCRIBE_URL = (
    "https://sns.us-east-1.amazonaws.com/?Action=ConfirmSubscription"
    f"&TopicArn={TOPIC}&Token=2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92"
)


def rsa_certificate() -> tuple[rsa.RSAPrivateKey, bytes]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(key, hashes.SHA256())
    )
    return key, cert.public_bytes(serialization.Encoding.PEM)


KEY, CERT_PEM = rsa_certificate()


def canonical(message: dict[str, Any]) -> bytes:
    """The string SNS signs (AWS docs, "Verifying the signatures of Amazon SNS messages")."""
    if message["Type"] == "Notification":
        keys = ["Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"]
    else:
        keys = ["Message", "MessageId", "SubscribeURL", "Timestamp", "Token", "TopicArn", "Type"]
    return "".join(f"{k}\n{message[k]}\n" for k in keys if k in message).encode()


def sign(message: dict[str, Any], *, version: str = "1", key: rsa.RSAPrivateKey = KEY) -> dict:
    algorithm = hashes.SHA1() if version == "1" else hashes.SHA256()
    signature = key.sign(canonical(message), padding.PKCS1v15(), algorithm)
    return {
        **message,
        "SignatureVersion": version,
        "Signature": base64.b64encode(signature).decode(),
        "SigningCertURL": message.get("SigningCertURL", CERT_URL),
    }


def notification(ses: dict[str, Any], *, message_id: str | None = None, **more: Any) -> dict:
    return {
        "Type": "Notification",
        "MessageId": message_id or str(uuid.uuid4()),
        "TopicArn": TOPIC,
        "Message": json.dumps(ses),
        "Timestamp": "2026-11-23T12:00:00.000Z",
        "SigningCertURL": CERT_URL,
        "UnsubscribeURL": "https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe",
        **more,
    }


def bounce(*emails: str, kind: str = "Permanent") -> dict[str, Any]:
    return {
        "notificationType": "Bounce",
        "bounce": {
            "bounceType": kind,
            "bounceSubType": "General",
            "bouncedRecipients": [
                {"emailAddress": e, "action": "failed", "status": "5.1.1"} for e in emails
            ],
            "timestamp": "2026-11-23T12:00:00.000Z",
            "feedbackId": "0100018c-feedback",
        },
        "mail": {"messageId": "0100018c-mail", "source": "no-reply@example.com"},
    }


def complaint(*emails: str) -> dict[str, Any]:
    return {
        "notificationType": "Complaint",
        "complaint": {
            "complainedRecipients": [{"emailAddress": e} for e in emails],
            "complaintFeedbackType": "abuse",
            "timestamp": "2026-11-23T12:00:00.000Z",
            "feedbackId": "0100018c-feedback",
        },
        "mail": {"messageId": "0100018c-mail"},
    }


class FakeAmazon:
    """Serves the certificate and records confirmations; `fetch` maps Amazon URLs onto it."""

    def __init__(self) -> None:
        self.url = ""
        self.fetched: list[str] = []
        self.cert = CERT_PEM
        self.app = web.Application()
        self.app.router.add_get("/{tail:.*}", self.serve)

    async def serve(self, request: web.Request) -> web.Response:
        if request.query.get("Action") == "ConfirmSubscription":
            return web.Response(text="<ConfirmSubscriptionResponse/>")
        return web.Response(body=self.cert)

    async def fetch(self, url: str) -> bytes:
        self.fetched.append(url)
        parts = urlsplit(url)
        local = f"{self.url}{parts.path}" + (f"?{parts.query}" if parts.query else "")
        async with aiohttp.ClientSession() as http, http.get(local) as response:
            return await response.read()


@pytest.fixture
async def amazon(aiohttp_server: Any) -> AsyncIterator[FakeAmazon]:
    fake = FakeAmazon()
    server: TestServer = await aiohttp_server(fake.app)
    fake.url = str(server.make_url("")).rstrip("/")
    yield fake


@pytest.fixture
async def client(
    db: Database, env: dict[str, str], migrated: str, aiohttp_client: Any, amazon: FakeAmazon
) -> Any:
    app = create_app(load_settings(environ={**env, "SES_SNS_TOPIC_ARNS": TOPIC}), migrated)
    app[SNS_CERTIFICATES] = SnsCertificates(amazon.fetch)
    return await aiohttp_client(app)


async def post(client: Any, message: dict[str, Any], **headers: str) -> Any:
    return await client.post(
        URL,
        data=json.dumps(message),
        headers={
            "Content-Type": "text/plain; charset=UTF-8",
            "x-amz-sns-message-type": message.get("Type", ""),
            "x-amz-sns-message-id": message.get("MessageId", ""),
            "x-amz-sns-topic-arn": message.get("TopicArn", ""),
            **headers,
        },
    )


async def rows(db: Database) -> list[Any]:
    return await db.fetch_all(
        "SELECT email, reason, provider FROM email_suppressions ORDER BY email"
    )


@pytest.mark.parametrize("version", ["1", "2"])
async def test_permanent_bounce_is_recorded_once(
    client: Any, db: Database, amazon: FakeAmazon, version: str
) -> None:
    message = sign(notification(bounce("Gone@Example.com", "b@example.com")), version=version)
    response = await post(client, message)
    assert response.status == 200, await response.text()
    assert (await response.json())["data"]["recorded"] == 2
    again = await post(client, message)  # SNS redelivers
    assert (await again.json())["data"]["duplicates"] == 1
    assert await rows(db) == [
        {"email": "b@example.com", "reason": "hard_bounce", "provider": "ses"},
        {"email": "gone@example.com", "reason": "hard_bounce", "provider": "ses"},
    ]
    assert amazon.fetched == [CERT_URL]  # the certificate is cached


async def test_complaint_is_recorded_and_transient_bounce_is_not(client: Any, db: Database) -> None:
    await post(client, sign(notification(complaint("angry@example.com"), Subject="Hi")))
    response = await post(client, sign(notification(bounce("soft@example.com", kind="Transient"))))
    assert (await response.json())["data"]["ignored"] == 1
    assert await rows(db) == [
        {"email": "angry@example.com", "reason": "complaint", "provider": "ses"}
    ]


async def test_subscription_confirmation_visits_the_subscribe_url(
    client: Any, amazon: FakeAmazon
) -> None:
    message = sign(
        {
            "Type": "SubscriptionConfirmation",
            "MessageId": str(uuid.uuid4()),
            "Token": "2336412f37fb687f5d51e6e241d09c805a5a57b30d712f794cc5f6a988666d92",
            "TopicArn": TOPIC,
            "Message": f"You have chosen to subscribe to the topic {TOPIC}.",
            "SubscribeURL": SUBSCRIBE_URL,
            "Timestamp": "2026-11-23T12:00:00.000Z",
        }
    )
    response = await post(client, message)
    assert response.status == 200
    assert amazon.fetched == [CERT_URL, SUBSCRIBE_URL]


async def test_a_confirmation_to_a_foreign_subscribe_url_is_refused(
    client: Any, amazon: FakeAmazon
) -> None:
    message = sign(
        {
            "Type": "SubscriptionConfirmation",
            "MessageId": str(uuid.uuid4()),
            "Token": "t",
            "TopicArn": TOPIC,
            "Message": "subscribe",
            "SubscribeURL": "https://attacker.example/?Action=ConfirmSubscription",
            "Timestamp": "2026-11-23T12:00:00.000Z",
        }
    )
    await error(await post(client, message), 401)
    assert amazon.fetched == [CERT_URL]


@pytest.mark.parametrize(
    "cert_url",
    [
        "https://attacker.example/cert.pem",
        "http://sns.us-east-1.amazonaws.com/cert.pem",
        "https://sns.us-east-1.amazonaws.com.attacker.example/cert.pem",
        "https://sns.us-east-1.amazonaws.com:8443/cert.pem",
        "https://user@sns.us-east-1.amazonaws.com/cert.pem",
        "https://evil-sns.us-east-1.amazonaws.com/cert.pem",
        "https://s3.amazonaws.com/sns.us-east-1.amazonaws.com/cert.pem",
    ],
)
async def test_a_foreign_certificate_url_is_never_fetched(
    client: Any, db: Database, amazon: FakeAmazon, cert_url: str
) -> None:
    message = sign(notification(bounce("x@example.com"), SigningCertURL=cert_url))
    await error(await post(client, message), 401, "UNAUTHORIZED")
    assert amazon.fetched == []
    assert await rows(db) == []


async def test_a_wrong_signature_or_a_tampered_message_is_refused(
    client: Any, db: Database
) -> None:
    other_key, _ = rsa_certificate()
    await error(await post(client, sign(notification(bounce("x@example.com")), key=other_key)), 401)
    tampered = sign(notification(bounce("x@example.com")))
    tampered["Message"] = json.dumps(bounce("victim@example.com"))
    await error(await post(client, tampered), 401)
    unknown_version = {**sign(notification(bounce("x@example.com"))), "SignatureVersion": "3"}
    await error(await post(client, unknown_version), 401)
    assert await rows(db) == []


async def test_an_unknown_topic_or_type_is_refused_before_the_body(
    client: Any, amazon: FakeAmazon
) -> None:
    message = sign(notification(bounce("x@example.com"), TopicArn="arn:aws:sns:x:1:other"))
    await error(await post(client, message), 401)
    good = sign(notification(bounce("x@example.com")))
    await error(await post(client, good, **{"x-amz-sns-message-type": "Bogus"}), 401)
    # Header and body must agree.
    await error(await post(client, good, **{"x-amz-sns-topic-arn": "arn:aws:sns:x:1:other"}), 401)
    assert amazon.fetched == []


async def test_a_certificate_that_is_not_pem_is_refused(client: Any, amazon: FakeAmazon) -> None:
    amazon.cert = b"<html>not a certificate</html>"
    await error(await post(client, sign(notification(bounce("x@example.com")))), 401)


async def test_unconfigured_is_404(
    db: Database, env: dict[str, str], migrated: str, aiohttp_client: Any
) -> None:
    client = await aiohttp_client(create_app(load_settings(environ=env), migrated))
    await error(await post(client, sign(notification(bounce("x@example.com")))), 404)
