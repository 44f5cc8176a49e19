"""Endpoint signing secrets at rest are sealed like TOTP secrets (no clear text in the table,
rows of before are sealed at start), deliveries still verify with standardwebhooks, and
`rotate-secret --now` (API and CLI) ends the old secret at once."""

from __future__ import annotations

import base64
import re
import uuid
from typing import Any

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tenantd.apikeys import service as apikeys
from tenantd.app.factory import create_app
from tenantd.db import Database
from tenantd.settings import Settings
from tenantd.webhooks import endpoints
from tenantd.webhooks.domain import Webhooks, webhooks_of
from tests.factories import run_tenantd
from tests.helpers import SECRET, data, eventually
from tests.webhooks.receiver import Receiver, start_receiver
from tests.webhooks.test_delivery import change, endpoint


@pytest.fixture
def services(app: web.Application) -> Webhooks:
    return webhooks_of(app)


async def stored(db: Database, endpoint_id: Any) -> dict[str, Any]:
    row = await db.fetch_one(
        "SELECT secret, secret_sealed, previous_secret, previous_secret_sealed,"
        " previous_secret_expires_at FROM webhook_endpoints WHERE id = %(id)s",
        {"id": endpoint_id},
    )
    assert row is not None
    return dict(row)


def holds(blob: Any, secret: str) -> bool:
    """Whether a stored value gives the secret away (whole, its key bytes, or base64)."""
    if blob is None:
        return False
    raw = bytes(blob)
    key = base64.b64decode(secret.removeprefix("whsec_"))
    return secret.encode() in raw or key in raw or secret.removeprefix("whsec_").encode() in raw


async def test_the_table_holds_no_clear_secret_and_deliveries_verify(
    services: Webhooks, aiohttp_server: Any, db: Database
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    endpoint_id = await endpoint(services, receiver)
    secret = receiver.secrets[0]
    row = await stored(db, endpoint_id)
    assert row["secret"] is None and row["secret_sealed"] is not None
    assert not holds(row["secret_sealed"], secret)
    rotated = await endpoints.rotate_secret(services, endpoint_id)
    row = await stored(db, endpoint_id)
    assert row["secret"] is None and row["previous_secret"] is None
    assert not holds(row["secret_sealed"], rotated.secret)
    assert not holds(row["previous_secret_sealed"], secret)
    # Both still sign during the overlap; the receiver verifies with standardwebhooks and svix.
    await change(services, "user.updated", "u1")
    await eventually(lambda: receiver.accepted)
    assert receiver.refused_signatures == 0
    assert len(receiver.accepted[0].signature.split(" ")) == 2


async def test_a_sealed_secret_moved_to_another_endpoint_does_not_open(
    services: Webhooks, aiohttp_server: Any, db: Database
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    first = await endpoint(services, receiver)
    second = await endpoint(services, receiver)
    await db.execute(
        "UPDATE webhook_endpoints SET secret_sealed ="
        " (SELECT secret_sealed FROM webhook_endpoints WHERE id = %(first)s) WHERE id = %(second)s",
        {"first": first, "second": second},
    )
    await change(services, "user.updated", "u1")
    await eventually(
        lambda: db.fetch_val("SELECT count(*) = 2 FROM webhook_deliveries WHERE attempts > 0")
    )
    rows = await db.fetch_all(
        "SELECT endpoint_id, last_error, status FROM webhook_deliveries ORDER BY endpoint_id"
    )
    by_endpoint = {row["endpoint_id"]: row for row in rows}
    assert by_endpoint[first]["status"] == "delivered"
    assert "does not open" in by_endpoint[second]["last_error"]
    assert len(receiver.accepted) == 1


async def test_rows_written_in_clear_are_sealed_at_start(
    db: Database, settings: Settings, migrated: str, aiohttp_server: Any
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    secret, previous = "whsec_" + "A" * 43 + "=", "whsec_" + "B" * 43 + "="
    receiver.secrets += [secret]
    endpoint_id = uuid.uuid4()
    # A row as the table held it before sealing: both secrets in clear, in their overlap.
    await db.execute(
        "INSERT INTO webhook_endpoints (id, url, secret, previous_secret,"
        " previous_secret_expires_at) VALUES (%(id)s, %(url)s, %(s)s, %(p)s,"
        " now() + interval '1 hour')",
        {"id": endpoint_id, "url": receiver.url + "/hook", "s": secret, "p": previous},
    )
    server = await aiohttp_server(create_app(settings, migrated))
    row = await stored(db, endpoint_id)
    assert row["secret"] is None and row["previous_secret"] is None
    assert not holds(row["secret_sealed"], secret)
    assert not holds(row["previous_secret_sealed"], previous)
    services: Webhooks = webhooks_of(server.app)
    await change(services, "user.updated", "u1")
    await eventually(lambda: receiver.accepted)
    headers = receiver.accepted[0]
    assert len(headers.signature.split(" ")) == 2  # the previous secret still in its overlap
    assert receiver.refused_signatures == 0


async def rotate_now_by_api(client: TestClient[Any, Any], db: Database, endpoint_id: Any) -> str:
    async with db.transaction() as conn:
        key = await apikeys.create_key(
            conn, secret_key=SECRET, name="ops", scopes=["webhooks:manage"]
        )
    response = await client.post(
        f"/api/v1/webhook-endpoints/{endpoint_id}/rotate-secret?now=true",
        headers={"Authorization": f"Bearer {key.token}"},
    )
    secret: str = (await data(response))["secret"]
    return secret


async def rotate_now_by_cli(env: dict[str, str], endpoint_id: Any) -> str:
    code, out, err = await run_tenantd(env, "webhooks", "rotate-secret", str(endpoint_id), "--now")
    assert code == 0, err
    assert "no longer signs" in out
    found = re.search(r"^secret (whsec_\S+)$", out, re.M)
    assert found, out
    return found.group(1)


@pytest.mark.parametrize("how", ["api", "cli"])
async def test_rotate_now_ends_the_old_secret_at_once(
    services: Webhooks,
    client: TestClient[Any, Any],
    env: dict[str, str],
    db: Database,
    aiohttp_server: Any,
    how: str,
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    endpoint_id = await endpoint(services, receiver)
    old = receiver.secrets[0]
    await endpoints.rotate_secret(services, endpoint_id)  # an earlier rotation, in its overlap
    if how == "api":
        new = await rotate_now_by_api(client, db, endpoint_id)
    else:
        new = await rotate_now_by_cli(env, endpoint_id)
    row = await stored(db, endpoint_id)
    assert row["previous_secret_sealed"] is None and row["previous_secret_expires_at"] is None
    receiver.secrets = [new]
    await change(services, "user.updated", "u1")
    await eventually(lambda: receiver.accepted)
    received = receiver.accepted[0]
    assert len(received.signature.split(" ")) == 1  # one signature: the new secret's alone
    # The old secret no longer verifies anything sent.
    assert not Receiver([old]).verify(orjson.dumps(received.body), _headers(received))


def _headers(received: Any) -> dict[str, str]:
    return {
        "webhook-id": received.webhook_id,
        "webhook-timestamp": received.timestamp,
        "webhook-signature": received.signature,
    }
