"""POST /api/v1/webhooks/postmark: HTTP Basic auth as Postmark sends it (credentials in the
webhook URL), bounce and spam-complaint payloads in Postmark's format, deduplication."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from tenantd.db import Database
from tests.email.support import Start
from tests.helpers import error

URL = "/api/v1/webhooks/postmark"
USER, PASSWORD = "postmark-hook", "pm-hook-secret-9"


def bounce(
    email: str, *, kind: str = "HardBounce", ident: int = 4323372036854775807, **more: Any
) -> bytes:
    """A bounce webhook body as documented by Postmark."""
    return json.dumps(
        {
            "RecordType": "Bounce",
            "MessageStream": "outbound",
            "ID": ident,
            "Type": kind,
            "TypeCode": 1,
            "Name": "Hard bounce",
            "Tag": "Test",
            "MessageID": "883953f4-6105-42a2-a16a-77a8eac79483",
            "Description": "The server was unable to deliver your message (ex: unknown user, "
            "mailbox not found).",
            "Details": "Test bounce details",
            "Email": email,
            "From": "sender@example.com",
            "BouncedAt": "2019-11-05T16:33:54.9070259Z",
            "DumpAvailable": True,
            "Inactive": True,
            "CanActivate": True,
            "Subject": "Test subject",
            **more,
        }
    ).encode()


def complaint(email: str, *, ident: int = 42) -> bytes:
    return json.dumps(
        {
            "RecordType": "SpamComplaint",
            "MessageStream": "outbound",
            "ID": ident,
            "Type": "SpamComplaint",
            "TypeCode": 512,
            "Email": email,
            "From": "sender@example.com",
            "BouncedAt": "2019-11-05T16:33:54.9070259Z",
            "Inactive": True,
        }
    ).encode()


async def client_with_hook(start: Start) -> Any:
    return await start(POSTMARK_WEBHOOK_USERNAME=USER, POSTMARK_WEBHOOK_PASSWORD=PASSWORD)


async def post(client: Any, body: bytes) -> Any:
    return await client.post(
        URL,
        data=body,
        headers={
            "Content-Type": "application/json",
            "Authorization": aiohttp.encode_basic_auth(USER, PASSWORD),
        },
    )


async def rows(db: Database) -> list[Any]:
    return await db.fetch_all(
        "SELECT email, reason, provider FROM email_suppressions ORDER BY email"
    )


async def test_hard_bounce_and_complaint_are_recorded_once(start: Start, db: Database) -> None:
    client = await client_with_hook(start)
    response = await post(client, bounce("Gone@Example.COM", ident=7))
    assert response.status == 200
    assert (await response.json())["data"]["recorded"] == 1
    again = await post(client, bounce("Gone@Example.COM", ident=7))  # Postmark retried
    assert (await again.json())["data"]["duplicates"] == 1
    await post(client, complaint("angry@example.com"))
    assert await rows(db) == [
        {"email": "angry@example.com", "reason": "complaint", "provider": "postmark"},
        {"email": "gone@example.com", "reason": "hard_bounce", "provider": "postmark"},
    ]


async def test_soft_bounces_create_nothing(start: Start, db: Database) -> None:
    client = await client_with_hook(start)
    for kind in ("SoftBounce", "Transient", "DnsError", "AutoResponder"):
        response = await post(client, bounce("soft@example.com", kind=kind, Inactive=False))
        assert (await response.json())["data"]["ignored"] == 1
    assert await rows(db) == []


async def test_a_deactivating_bounce_of_another_type_is_inactive(
    start: Start, db: Database
) -> None:
    client = await client_with_hook(start)
    await post(client, bounce("off@example.com", kind="ManuallyDeactivated", Inactive=True))
    assert await rows(db) == [
        {"email": "off@example.com", "reason": "inactive", "provider": "postmark"}
    ]


@pytest.mark.parametrize(
    "auth",
    [None, (USER, "wrong"), ("other", PASSWORD), (USER, PASSWORD + "x"), (USER, "")],
)
async def test_missing_or_wrong_credentials_are_401(
    start: Start, db: Database, auth: tuple[str, str] | None
) -> None:
    client = await client_with_hook(start)
    headers = {"Content-Type": "application/json"}
    if auth is not None:
        headers["Authorization"] = aiohttp.encode_basic_auth(*auth)
    response = await client.post(URL, data=bounce("x@example.com"), headers=headers)
    await error(response, 401, "UNAUTHORIZED")
    assert await rows(db) == []


@pytest.mark.parametrize(
    "header", ["Bearer abc", "Basic !!!notbase64", "Basic " + "A" * 2000, "Digest x"]
)
async def test_malformed_authorization_is_401(start: Start, header: str) -> None:
    client = await client_with_hook(start)
    response = await client.post(
        URL, data=bounce("x@example.com"), headers={"Authorization": header}
    )
    await error(response, 401)


async def test_unconfigured_is_404(start: Start) -> None:
    client = await start(POSTMARK_WEBHOOK_PASSWORD=PASSWORD)  # user missing
    response = await post(client, bounce("x@example.com"))
    await error(response, 404)


async def test_malformed_bodies(start: Start, db: Database) -> None:
    client = await client_with_hook(start)
    await error(await post(client, b"not json"), 422, "VALIDATION_ERROR")
    await error(await post(client, b"[1]"), 422, "VALIDATION_ERROR")
    response = await post(client, bounce("not-an-address"))
    assert (await response.json())["data"]["malformed"] == 1
    assert await rows(db) == []
