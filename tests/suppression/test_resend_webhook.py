"""POST /api/v1/webhooks/resend: Svix signatures (made by the real `svix` library), verdicts,
deduplication on svix-id, hostile and malformed deliveries."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import hashlib
import hmac
import io
import json
import logging
import os
import time
import uuid
from typing import Any

import pytest
from standardwebhooks.webhooks import Webhook as StandardWebhook
from svix.webhooks import Webhook, WebhookVerificationError

from tenantd.db import Database
from tenantd.suppression.webhooks import resend
from tests.email.support import Start

URL = "/api/v1/webhooks/resend"
SECRET = "whsec_" + base64.b64encode(os.urandom(24)).decode()


def event(kind: str, *to: str, **data: Any) -> bytes:
    return json.dumps(
        {
            "type": kind,
            "created_at": "2024-11-22T23:41:12.126Z",
            "data": {
                "created_at": "2024-11-22T23:41:11.894719+00:00",
                "email_id": str(uuid.uuid4()),
                "from": "Acme <onboarding@resend.dev>",
                "to": list(to),
                "subject": "Sending this example",
                **data,
            },
        }
    ).encode()


def svix_headers(
    body: bytes,
    *,
    secret: str = SECRET,
    msg_id: str | None = None,
    at: float | None = None,
) -> dict[str, str]:
    """Headers exactly as Svix sends them, signed by the svix library itself."""
    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    timestamp = dt.datetime.fromtimestamp(int(at if at is not None else time.time()), tz=dt.UTC)
    return {
        "svix-id": msg_id,
        "svix-timestamp": str(int(timestamp.timestamp())),
        "svix-signature": Webhook(secret).sign(msg_id, timestamp, body.decode()),
        "Content-Type": "application/json",
    }


def standard_headers(body: bytes, *, secret: str = SECRET) -> dict[str, str]:
    """Standard Webhooks names (webhook-*), signed by the `standardwebhooks` library."""
    msg_id = f"msg_{uuid.uuid4().hex}"
    timestamp = dt.datetime.fromtimestamp(int(time.time()), tz=dt.UTC)
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(int(timestamp.timestamp())),
        "webhook-signature": StandardWebhook(secret).sign(msg_id, timestamp, body.decode()),
        "Content-Type": "application/json",
    }


@pytest.fixture
async def client(start: Start) -> Any:
    return await start(RESEND_WEBHOOK_SECRET=SECRET)


async def rows(db: Database) -> list[dict[str, Any]]:
    return await db.fetch_all(
        "SELECT email, reason, provider FROM email_suppressions ORDER BY email"
    )


# --- verdicts -------------------------------------------------------------------------------


async def test_bounced_suppresses_every_recipient(
    client: Any, db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    body = event(
        "email.bounced",
        "Ann@Example.COM",
        " bob@example.com",
        bounce={
            "message": "The recipient's email address does not exist.",
            "subType": "General",
            "type": "Permanent",
        },
    )
    headers = svix_headers(body)
    response = await client.post(URL, data=body, headers=headers)
    payload = await response.json()
    assert response.status == 200, payload
    assert payload["success"] is True
    assert payload["data"] == {
        "events": 1,
        "recorded": 2,
        "duplicates": 0,
        "ignored": 0,
        "malformed": 0,
    }
    assert await rows(db) == [
        {"email": "ann@example.com", "reason": "hard_bounce", "provider": "resend"},
        {"email": "bob@example.com", "reason": "hard_bounce", "provider": "resend"},
    ]
    recorded = [r for r in caplog.records if r.getMessage() == "email suppression recorded"]
    assert {(r.provider, r.reason, r.levelno) for r in recorded} == {
        ("resend", "hard_bounce", logging.INFO)
    }
    assert len(recorded) == 2
    secret_part = SECRET.removeprefix("whsec_")
    signature = headers["svix-signature"].split(",", 1)[1]
    for record in caplog.records:
        text = record.getMessage() + repr(record.__dict__)
        assert secret_part not in text and signature not in text


async def test_complained_suppresses_with_reason_complaint(client: Any, db: Database) -> None:
    body = event("email.complained", "carol@example.com")
    response = await client.post(URL, data=body, headers=svix_headers(body))
    assert response.status == 200
    assert await rows(db) == [
        {"email": "carol@example.com", "reason": "complaint", "provider": "resend"}
    ]


@pytest.mark.parametrize(
    "kind",
    [
        "email.sent",
        "email.delivered",
        "email.delivery_delayed",
        "email.opened",
        "email.clicked",
        "contact.created",
        "something.new",
    ],
)
async def test_other_event_types_are_ignored_with_200(client: Any, db: Database, kind: str) -> None:
    body = event(kind, "dave@example.com")
    response = await client.post(URL, data=body, headers=svix_headers(body))
    assert response.status == 200
    assert (await response.json())["data"]["ignored"] == 1
    assert await rows(db) == []
    assert await db.fetch_val("SELECT count(*) FROM webhook_events") == 0


async def test_a_row_that_exists_is_kept(client: Any, db: Database) -> None:
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider)"
        " VALUES ('erin@example.com', 'manual', 'manual')"
    )
    body = event("email.bounced", "erin@EXAMPLE.com")
    response = await client.post(URL, data=body, headers=svix_headers(body))
    assert (await response.json())["data"]["recorded"] == 0
    assert await rows(db) == [
        {"email": "erin@example.com", "reason": "manual", "provider": "manual"}
    ]


async def test_bounce_without_usable_recipients_records_nothing(client: Any, db: Database) -> None:
    body = event("email.bounced", "", "not-an-address")
    response = await client.post(URL, data=body, headers=svix_headers(body))
    assert response.status == 200
    assert (await response.json())["data"]["malformed"] == 1
    assert await rows(db) == []


async def test_the_raw_body_is_verified_as_sent_not_reserialised(client: Any, db: Database) -> None:
    # Odd spacing, key order and escapes: any re-serialisation would break the signature.
    body = (
        b'{ "data" : {"to":["fr\\u00e9d@example.com"] ,"email_id":"x"},\n'
        b'   "type":"email.bounced"  }'
    )
    response = await client.post(URL, data=body, headers=svix_headers(body))
    assert response.status == 200
    assert await rows(db) == [
        {"email": "fréd@example.com", "reason": "hard_bounce", "provider": "resend"}
    ]


async def test_signed_body_that_is_not_json_is_refused(client: Any) -> None:
    body = b"not json"
    response = await client.post(URL, data=body, headers=svix_headers(body))
    assert response.status == 422


# --- deduplication --------------------------------------------------------------------------


async def test_a_retried_delivery_is_a_no_op(client: Any, db: Database) -> None:
    body = event("email.bounced", "frank@example.com")
    first = svix_headers(body, msg_id="msg_retry")
    assert (await client.post(URL, data=body, headers=first)).status == 200
    # The operator lets the address through again; the retry must not re-suppress it.
    await db.execute("DELETE FROM email_suppressions")
    retry = svix_headers(body, msg_id="msg_retry", at=time.time() + 5)  # Svix re-signs
    response = await client.post(URL, data=body, headers=retry)
    assert response.status == 200
    assert (await response.json())["data"]["duplicates"] == 1
    assert await rows(db) == []
    assert await db.fetch_all("SELECT provider, event_id FROM webhook_events") == [
        {"provider": "resend", "event_id": "msg_retry"}
    ]


async def test_concurrent_copies_of_one_delivery_apply_once(client: Any, db: Database) -> None:
    body = event("email.complained", "gina@example.com")
    headers = svix_headers(body, msg_id="msg_concurrent")
    responses = await asyncio.gather(
        *(client.post(URL, data=body, headers=headers) for _ in range(12))
    )
    datas = [(await r.json())["data"] for r in responses]
    assert all(r.status == 200 for r in responses)
    assert sum(d["recorded"] for d in datas) == 1
    assert sum(d["duplicates"] for d in datas) == 11
    assert await db.fetch_val("SELECT count(*) FROM webhook_events") == 1
    assert await db.fetch_val("SELECT count(*) FROM email_suppressions") == 1


async def test_concurrent_distinct_events_for_one_address_leave_one_row(
    client: Any, db: Database
) -> None:
    bodies = [event("email.bounced", "hank@example.com", "Hank@Example.com ") for _ in range(10)]
    responses = await asyncio.gather(
        *(client.post(URL, data=b, headers=svix_headers(b)) for b in bodies)
    )
    assert all(r.status == 200 for r in responses)
    assert await db.fetch_val("SELECT count(*) FROM webhook_events") == 10
    # Both spellings are one address: one row.
    assert await rows(db) == [
        {"email": "hank@example.com", "reason": "hard_bounce", "provider": "resend"},
    ]


async def test_standard_webhooks_header_names_are_accepted(client: Any, db: Database) -> None:
    body = event("email.bounced", "std@example.com")
    headers = standard_headers(body)
    StandardWebhook(SECRET).verify(body, headers)  # the library agrees with itself
    response = await client.post(URL, data=body, headers=headers)
    assert response.status == 200, await response.text()
    assert (await response.json())["data"]["recorded"] == 1
    assert await rows(db) == [
        {"email": "std@example.com", "reason": "hard_bounce", "provider": "resend"}
    ]
    assert await db.fetch_all("SELECT provider, event_id FROM webhook_events") == [
        {"provider": "resend", "event_id": headers["webhook-id"]}
    ]
    # The same delivery again under the svix-* names is recognised as the same message.
    svix_named = {
        "svix-id": headers["webhook-id"],
        "svix-timestamp": headers["webhook-timestamp"],
        "svix-signature": headers["webhook-signature"],
    }
    again = await client.post(URL, data=body, headers=svix_named)
    assert (await again.json())["data"]["duplicates"] == 1


async def test_standard_webhooks_names_signed_with_another_secret_are_refused(
    client: Any, db: Database
) -> None:
    body = event("email.bounced", "std@example.com")
    other = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    await assert_refused(client, db, body, standard_headers(body, secret=other))


async def test_svix_names_win_over_standard_names_like_the_svix_library(
    client: Any, db: Database
) -> None:
    body = event("email.bounced", "both@example.com")
    other = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    good_svix, forged_standard = svix_headers(body), standard_headers(body, secret=other)
    response = await client.post(URL, data=body, headers={**forged_standard, **good_svix})
    assert response.status == 200
    Webhook(SECRET).verify(body, {**forged_standard, **good_svix})
    await db.execute("DELETE FROM email_suppressions")
    await db.execute("DELETE FROM webhook_events")
    forged_svix, good_standard = svix_headers(body, secret=other), standard_headers(body)
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(body, {**good_standard, **forged_svix})
    await assert_refused(client, db, body, {**good_standard, **forged_svix})


# --- hostile deliveries ---------------------------------------------------------------------


async def assert_refused(client: Any, db: Database, body: bytes, headers: dict[str, str]) -> None:
    response = await client.post(URL, data=body, headers=headers)
    payload = await response.json()
    assert response.status == 401, payload
    assert payload["error"]["code"] == "UNAUTHORIZED"
    assert await rows(db) == []
    assert await db.fetch_val("SELECT count(*) FROM webhook_events") == 0


# Time passes between signing and checking (more on a busy machine): a future timestamp
# gets closer to the window and a past one further out, so those two keep a 30 s margin.
@pytest.mark.parametrize("offset", [-301, -3600, 330, 3600])
async def test_stale_and_future_timestamps_are_refused(
    client: Any, db: Database, offset: int
) -> None:
    body = event("email.bounced", "ivy@example.com")
    await assert_refused(client, db, body, svix_headers(body, at=time.time() + offset))


@pytest.mark.parametrize("offset", [-270, 290])
async def test_timestamps_inside_five_minutes_are_accepted(
    client: Any, db: Database, offset: int
) -> None:
    body = event("email.bounced", "ivy@example.com")
    response = await client.post(
        URL, data=body, headers=svix_headers(body, at=time.time() + offset)
    )
    assert response.status == 200


async def test_tampered_body_is_refused(client: Any, db: Database) -> None:
    body = event("email.delivered", "jack@example.com")
    headers = svix_headers(body)
    tampered = body.replace(b"email.delivered", b"email.complained")
    await assert_refused(client, db, tampered, headers)


@pytest.mark.parametrize("header", ["svix-id", "svix-timestamp"])
async def test_tampered_signed_headers_are_refused(client: Any, db: Database, header: str) -> None:
    body = event("email.bounced", "kim@example.com")
    headers = svix_headers(body)
    headers[header] = "msg_other" if header == "svix-id" else str(int(headers[header]) + 1)
    await assert_refused(client, db, body, headers)


async def test_signature_from_another_secret_is_refused(client: Any, db: Database) -> None:
    body = event("email.bounced", "lee@example.com")
    other = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    await assert_refused(client, db, body, svix_headers(body, secret=other))


@pytest.mark.parametrize("header", ["svix-id", "svix-timestamp", "svix-signature"])
async def test_missing_headers_are_refused(client: Any, db: Database, header: str) -> None:
    body = event("email.bounced", "max@example.com")
    headers = svix_headers(body)
    del headers[header]
    await assert_refused(client, db, body, headers)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda sig: "v2," + sig.split(",", 1)[1],  # unknown version
        lambda sig: sig.split(",", 1)[1],  # no version
        lambda sig: "v1," + sig.split(",", 1)[1][:-4] + "AAA=",  # flipped bits
        lambda sig: "v1,!!!not-base64!!!",
        lambda sig: "",
        lambda sig: "v1,",
    ],
)
async def test_malformed_signatures_are_refused(client: Any, db: Database, mangle: Any) -> None:
    body = event("email.bounced", "ned@example.com")
    headers = svix_headers(body)
    headers["svix-signature"] = mangle(headers["svix-signature"])
    await assert_refused(client, db, body, headers)


@pytest.mark.parametrize("value", ["12.5", "-1", "abc", "１７００００００００", ""])
async def test_malformed_timestamps_are_refused(client: Any, db: Database, value: str) -> None:
    body = event("email.bounced", "oli@example.com")
    headers = svix_headers(body)
    headers["svix-timestamp"] = value
    await assert_refused(client, db, body, headers)


async def test_any_matching_v1_entry_among_several_is_accepted(client: Any, db: Database) -> None:
    # During secret rotation Svix sends one entry per secret, space-separated.
    body = event("email.bounced", "pat@example.com")
    headers = svix_headers(body)
    other = "whsec_" + base64.b64encode(os.urandom(24)).decode()
    decoy = svix_headers(body, secret=other, msg_id=headers["svix-id"])["svix-signature"]
    headers["svix-signature"] = f"v1a,AAAA {decoy} {headers['svix-signature']} v1,####"
    response = await client.post(URL, data=body, headers=headers)
    assert response.status == 200
    assert len(await rows(db)) == 1


async def test_unconfigured_webhook_answers_404(start: Start, db: Database) -> None:
    client = await start(RESEND_WEBHOOK_SECRET=None)
    body = event("email.bounced", "quin@example.com")
    response = await client.post(URL, data=body, headers=svix_headers(body))
    assert response.status == 404
    assert await rows(db) == []


async def test_body_over_ten_mib_is_refused(client: Any, db: Database) -> None:
    body = b" " * (10 * 1024 * 1024 + 1)
    response = await client.post(URL, data=io.BytesIO(body), headers=svix_headers(b"{}"))
    assert response.status == 413
    assert await rows(db) == []


async def test_a_two_megabyte_delivery_is_verified_and_applied(client: Any, db: Database) -> None:
    body = event("email.bounced", "rae@example.com", padding="x" * (2 * 1024 * 1024))
    assert len(body) > 2 * 1024 * 1024
    response = await client.post(URL, data=io.BytesIO(body), headers=svix_headers(body))
    assert response.status == 200
    assert len(await rows(db)) == 1


# --- the verifier itself -------------------------------------------


async def test_a_signed_body_that_is_not_utf8_is_refused_not_a_500(
    client: Any, db: Database
) -> None:
    body = b'{"type": "email.bounced", "to": "\xff"}'
    msg_id, now = "msg_latin1", int(time.time())
    # Svix signs text; sign the same bytes the way it would, with the standard library's HMAC.
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    mac = hmac.new(key, f"{msg_id}.{now}.".encode() + body, hashlib.sha256).digest()
    headers = {
        "svix-id": msg_id,
        "svix-timestamp": str(now),
        "svix-signature": "v1," + base64.b64encode(mac).decode(),
    }
    response = await client.post(URL, data=body, headers=headers)
    assert response.status == 401
    assert await rows(db) == []


def test_secret_without_the_whsec_prefix_is_accepted_like_svix() -> None:
    body = b"{}"
    bare = SECRET.removeprefix("whsec_")
    headers = svix_headers(body)
    assert resend.verify(bare, headers, body, now=time.time()) == headers["svix-id"]


def test_a_malformed_secret_is_a_configuration_error() -> None:
    with pytest.raises(ValueError, match="RESEND_WEBHOOK_SECRET"):
        resend.verifier("whsec_***not base64***")
