"""Bodies an attacker shapes: JSON nested past 32 levels is 422 at every entry that takes a
body (API routes, the hosted step-up form, the provider webhooks), found without recursion and
without a traceback; the rate limit counts a request before its body is judged; an Origin or
Referer that does not parse is 403; a client that hangs up mid-body is one debug line."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import uuid
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from tenantd.apikeys.service import SCOPES
from tenantd.db import Database
from tenantd.settings import Settings
from tenantd.web.json import MAX_JSON_DEPTH, json_depth_over
from tenantd.web.routing import ROUTE_SPEC
from tenantd.web.spec import Access, RouteSpec
from tests.apikeys.helpers import bearer, new_key
from tests.email.support import Start
from tests.factories import Factory
from tests.helpers import ORIGIN, error, eventually
from tests.mfa.helpers import signed_in
from tests.suppression.test_postmark_webhook import PASSWORD as POSTMARK_PASSWORD
from tests.suppression.test_postmark_webhook import USER as POSTMARK_USER
from tests.suppression.test_resend_webhook import SECRET as RESEND_SECRET
from tests.suppression.test_resend_webhook import svix_headers
from tests.suppression.test_sendgrid_webhook import PUBLIC_DER_B64
from tests.suppression.test_sendgrid_webhook import sign as sendgrid_sign
from tests.suppression.test_ses_webhook import TOPIC as SES_TOPIC
from tests.ui.test_mfa_pages import post_form, token_in

DEPTH = 300  # what the review sent: past Python's stack in any recursive walk
DEEP_MESSAGE = f"nested deeper than {MAX_JSON_DEPTH} levels"


def nested(depth: int, leaf: Any = 1) -> str:
    """`depth` objects, one inside the other, as JSON text (built without recursion)."""
    return '{"a":' * depth + json.dumps(leaf) + "}" * depth


def deep_body(spec: RouteSpec) -> bytes:
    """A body whose first field holds the deep value: the validators get to walk it."""
    assert spec.body is not None
    name, field = next(iter(spec.body.model_fields.items()))
    return f'{{"{field.alias or name}":{nested(DEPTH)}}}'.encode()


def concrete(path: str) -> str:
    return re.sub(r"{\w+}", str(uuid.uuid4()), path)


def problems(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """Records at ERROR or above, or carrying a traceback."""
    return [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


# --- the scan itself ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "over"),
    [
        ("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH, False),
        ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), True),
        (nested(MAX_JSON_DEPTH), False),
        (nested(MAX_JSON_DEPTH + 1), True),
        (json.dumps({"a": "[" * 500 + "{" * 500}), False),  # brackets inside a string
        (json.dumps(['\\"[[[' * 100, "x"]), False),  # escaped quotes do not end the string
        ("[" * 40 + '"' + "]" * 40, True),  # an unpaired quote (malformed) ends no string
        ("[" + "[[]]," * 10_000 + "1]", False),  # many brackets, shallow
        (nested(100_000), True),  # far past orjson's own limit: no parser is reached
    ],
)
def test_the_depth_scan(text: str, over: bool) -> None:
    assert json_depth_over(text) is over
    assert json_depth_over(text.encode()) is over


# --- every API route that takes a JSON body ------------------------------------------------------


async def test_every_json_route_answers_a_deep_body_with_422_and_logs_no_traceback(
    server: Any,
    make_client: Any,
    factory: Factory,
    db: Database,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenantd")
    user = await factory.user()
    browser = await signed_in(make_client, db, settings, user)
    anonymous = await make_client()
    key = await new_key(db, *SCOPES)
    specs = [spec for spec in server.app[ROUTE_SPEC] if spec.body is not None]
    assert len(specs) > 30  # the walk reaches the whole API, not a handful
    for spec in specs:
        client = browser if spec.access in (Access.AUTH, Access.TRY) else anonymous
        headers = {"Content-Type": "application/json"}
        if spec.access is Access.API_KEY:
            headers.update(bearer(key.token))
        response = await client.request(
            spec.method, concrete(spec.path), data=deep_body(spec), headers=headers
        )
        found = await error(response, 422, "VALIDATION_ERROR")
        assert found["details"]["fields"] == {"body": DEEP_MESSAGE}, spec.name
    assert problems(caplog) == []
    assert "Traceback" not in caplog.text and "RecursionError" not in caplog.text
    # One warning line per request, not pages of traceback: the log stays smaller than the bodies.
    sent = sum(len(deep_body(spec)) for spec in specs)
    assert len(caplog.text) < sent


async def test_the_rate_limit_counts_a_request_before_its_body_is_judged(
    start: Start, caplog: pytest.LogCaptureFixture
) -> None:
    client = await start(RATE_LIMIT_LOGIN_PER_IP="3")
    body = '{"email": "victim@example.com", "password": ' + nested(DEPTH) + "}"
    statuses = []
    for _ in range(5):
        response = await client.post(
            "/api/v1/auth/login", data=body, headers={"Content-Type": "application/json"}
        )
        statuses.append(response.status)
    assert statuses == [422, 422, 422, 429, 429]
    assert problems(caplog) == []


# --- the hosted step-up form (its passkey field is JSON) -----------------------------------------


async def test_the_step_up_form_with_a_deep_passkey_answers_without_a_5xx(
    make_client: Any,
    factory: Factory,
    db: Database,
    settings: Settings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenantd")
    user = await factory.user()
    stale = await signed_in(make_client, db, settings, user, auth_age=3600)
    # A sensitive change from an old sign-in brings up the step-up form.
    response = await post_form(
        stale,
        "/account",
        "/account/password",
        currentPassword=user.password,
        newPassword="another long password",
    )
    page = await response.text()
    assert 'data-testid="stepup"' in page
    response = await stale.post(
        "/reauth",
        data={"csrf": token_in(page, "/reauth"), "back": "/account", "passkey": nested(DEPTH)},
        allow_redirects=False,
    )
    assert response.status < 500
    assert response.status != 303  # not stepped up
    assert problems(caplog) == []


# --- the provider webhooks (authenticated deliveries, deep bodies) -------------------------------


def postmark_auth() -> dict[str, str]:
    token = base64.b64encode(f"{POSTMARK_USER}:{POSTMARK_PASSWORD}".encode()).decode()
    return {"Authorization": f"Basic {token}", "Content-Type": "application/json"}


@pytest.fixture
async def providers(start: Start) -> TestClient[Any, Any]:
    return await start(
        RESEND_WEBHOOK_SECRET=RESEND_SECRET,
        POSTMARK_WEBHOOK_USERNAME=POSTMARK_USER,
        POSTMARK_WEBHOOK_PASSWORD=POSTMARK_PASSWORD,
        SENDGRID_WEBHOOK_PUBLIC_KEY=PUBLIC_DER_B64,
        SES_SNS_TOPIC_ARNS=SES_TOPIC,
    )


async def test_a_deep_delivery_to_any_provider_webhook_is_422(
    providers: TestClient[Any, Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenantd")
    deep = (
        '{"RecordType": "Bounce", "Type": "HardBounce", "Extra": ' + nested(DEPTH) + "}"
    ).encode()
    response = await providers.post("/api/v1/webhooks/postmark", data=deep, headers=postmark_auth())
    found = await error(response, 422, "VALIDATION_ERROR")
    assert found["details"]["fields"] == {"body": DEEP_MESSAGE}
    deep = ('{"type": "email.bounced", "data": ' + nested(DEPTH) + "}").encode()
    response = await providers.post(
        "/api/v1/webhooks/resend", data=deep, headers=svix_headers(deep)
    )
    found = await error(response, 422, "VALIDATION_ERROR")
    assert found["details"]["fields"] == {"body": DEEP_MESSAGE}
    deep = (
        '[{"event": "bounce", "email": "x@example.com", "extra": ' + nested(DEPTH) + "}]"
    ).encode()
    response = await providers.post(
        "/api/v1/webhooks/sendgrid", data=deep, headers=sendgrid_sign(deep)
    )
    found = await error(response, 422, "VALIDATION_ERROR")
    assert found["details"]["fields"] == {"body": DEEP_MESSAGE}
    # SES: the SNS envelope is JSON read before its signature can be checked.
    deep = (
        '{"Type": "Notification", "TopicArn": "' + SES_TOPIC + '", "x": ' + nested(DEPTH) + "}"
    ).encode()
    response = await providers.post(
        "/api/v1/webhooks/ses",
        data=deep,
        headers={
            "Content-Type": "text/plain; charset=UTF-8",
            "x-amz-sns-message-type": "Notification",
            "x-amz-sns-message-id": str(uuid.uuid4()),
            "x-amz-sns-topic-arn": SES_TOPIC,
        },
    )
    found = await error(response, 422, "VALIDATION_ERROR")
    assert found["details"]["fields"] == {"body": DEEP_MESSAGE}
    assert problems(caplog) == []


# --- Origin and Referer that do not parse --------------------------------------------------------


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://[::1"},
        {"Origin": "http://[::1]:notaport]"},
        {"Origin": "http://[fe80::1%zz"},
        {"Referer": "http://[::1/account"},
    ],
)
async def test_an_origin_or_referer_that_does_not_parse_is_403(
    make_client: Any,
    factory: Factory,
    db: Database,
    settings: Settings,
    headers: dict[str, str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user), origin=None)
    response = await client.post("/api/v1/auth/logout", headers=headers)
    await error(response, 403, "FORBIDDEN")
    assert problems(caplog) == []
    # The same browser from the allowed origin is let through.
    response = await client.post("/api/v1/auth/logout", headers={"Origin": ORIGIN})
    assert response.status == 200


# --- a client that hangs up mid-body -------------------------------------------------------------


async def test_a_client_closing_mid_body_is_one_debug_line(
    server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="tenantd")
    reader, writer = await asyncio.open_connection(server.host, server.port)
    head = (
        "POST /api/v1/auth/login HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    writer.write(head.encode() + b'{"email": "a@example.com", "pass')
    await writer.drain()

    def logged() -> list[logging.LogRecord]:
        return [r for r in caplog.records if r.name == "tenantd.http"]

    await asyncio.sleep(0)  # the server reads what was sent before the hang-up
    writer.close()
    await eventually(lambda: len(logged()) == 1)
    [line] = logged()
    assert line.levelno == logging.DEBUG
    assert line.http["status"] == 499  # type: ignore[attr-defined]
    assert problems(caplog) == []
    assert "Traceback" not in caplog.text
    assert await reader.read() == b""  # closed without an answer to anyone
