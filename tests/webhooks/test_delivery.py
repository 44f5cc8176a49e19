"""Outbound webhooks end to end against a receiver that verifies with standardwebhooks and
svix: signatures, retries with the same webhook-id, order per object across retries, the
rotation overlap, refusals (metadata addresses, redirects), giving up and disabling."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import aiopg
import orjson
import pytest
from aiohttp import web

from tenantd.errors import ValidationFailed
from tenantd.ops.metrics import METRICS
from tenantd.outbox import Actor, emit
from tenantd.webhooks import endpoints
from tenantd.webhooks.domain import Webhooks, webhooks_of
from tenantd.webhooks.sender import WebhookSender
from tests.helpers import eventually
from tests.webhooks.receiver import Receiver, start_receiver

ACTOR = Actor.system("test")


@pytest.fixture
def services(app: web.Application) -> Webhooks:
    return webhooks_of(app)


async def endpoint(
    services: Webhooks, receiver: Receiver, *, events: list[str] | None = None
) -> uuid.UUID:
    created = await endpoints.add_endpoint(services, url=receiver.url + "/hook", events=events)
    receiver.secrets.append(created.secret)
    endpoint_id: uuid.UUID = created.endpoint["id"]
    return endpoint_id


async def change(services: Webhooks, type_: str, object_id: str, **data: Any) -> str:
    async with services.db.transaction() as conn:
        return await emit(conn, type_, account_id=None, actor=ACTOR, data={"id": object_id, **data})


async def deliveries(services: Webhooks) -> list[dict[str, Any]]:
    return await services.db.fetch_all("SELECT * FROM webhook_deliveries ORDER BY id")


async def test_a_change_arrives_signed_in_the_standard_webhooks_format(
    services: Webhooks, aiohttp_server: Any, factory: Any
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    await endpoint(services, receiver)
    user = await factory.user()  # account.created + membership.created
    await eventually(lambda: len(receiver.accepted) >= 2)
    created = receiver.of_type("account.created")[0]
    body = created.body
    assert body["id"] == created.webhook_id and body["id"].startswith("evt_")
    assert body["accountId"] == str(user.account_id)
    assert body["data"]["id"] == str(user.account_id)
    assert body["actor"] == {"type": "user", "id": str(user.id)}
    assert body["occurredAt"].endswith("Z")
    assert created.signature.startswith("v1,")
    assert receiver.refused_signatures == 0
    rows = await eventually(lambda: _all_settled(services))
    assert {r["status"] for r in rows} == {"delivered"}


async def _all_settled(services: Webhooks) -> list[dict[str, Any]] | None:
    rows = await deliveries(services)
    if rows and all(r["status"] != "pending" for r in rows):
        return rows
    return None


async def test_a_filtered_endpoint_gets_only_its_types(
    services: Webhooks, aiohttp_server: Any
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    await endpoint(services, receiver, events=["account.*"])
    await change(services, "user.updated", "u1")
    await change(services, "account.updated", "a1")
    await eventually(lambda: receiver.accepted)
    await asyncio.sleep(0.3)
    assert [r.body["type"] for r in receiver.accepted] == ["account.updated"]


async def test_retries_back_off_and_keep_the_webhook_id(
    services: Webhooks, aiohttp_server: Any
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    receiver.answer = lambda r: 500 if len(receiver.attempts) <= 3 else 200
    await endpoint(services, receiver)
    event_id = await change(services, "user.updated", "u1", firstName="Ada")
    await eventually(lambda: receiver.accepted, within=60)
    assert [r.webhook_id for r in receiver.attempts] == [event_id] * 4
    gaps = [b.at - a.at for a, b in zip(receiver.attempts, receiver.attempts[1:], strict=False)]
    # base 0.2 s doubling with +-20% jitter: ~0.2, ~0.4, ~0.8
    assert gaps[0] >= 0.15 and gaps[1] >= 0.3 and gaps[2] >= 0.6, gaps
    assert gaps[2] > gaps[0]
    rows = await eventually(lambda: _all_settled(services))
    assert rows[0]["status"] == "delivered" and rows[0]["attempts"] == 4


async def test_events_about_one_object_arrive_in_order_across_retries(
    services: Webhooks, aiohttp_server: Any
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    failures = {"n": 0}

    def answer(received: Any) -> int:
        # The first event of object X fails three times.
        if received.body["data"]["id"] == "X" and received.body["data"]["step"] == 1:
            failures["n"] += 1
            if failures["n"] <= 3:
                return 503
        return 200

    receiver.answer = answer
    await endpoint(services, receiver)
    for step in (1, 2, 3):
        await change(services, "user.updated", "X", step=step)
    await change(services, "user.updated", "Y", step=1)
    await eventually(lambda: len(receiver.accepted) == 4, within=60)
    x_steps = [r.body["data"]["step"] for r in receiver.attempts if r.body["data"]["id"] == "X"]
    # Nothing later about X was even attempted before step 1 got through.
    assert x_steps == [1, 1, 1, 1, 2, 3]
    # Y did not wait for X.
    order = [r.body["data"]["id"] for r in receiver.accepted]
    assert order.index("Y") < order.index("X")


async def test_a_settle_locks_its_rows_in_id_order_as_a_park_does(
    services: Webhooks, aiohttp_server: Any
) -> None:
    """A batch whose first delivery of an object fails parks the later one and records the
    failure. A park elsewhere (a later delivery of the same object, in another job) takes
    shares on both in id order. Were the settle to lock the later row before the earlier one,
    each would wait for the other: a deadlock, and the job retried seconds later (an
    overloaded CI run saw it). Here a connection holds the park's first share, and the
    second must still be free while the settle waits."""
    receiver = await start_receiver(aiohttp_server, [])
    gate = receiver.gate = asyncio.Event()
    answered: list[int] = []

    def answer(received: Any) -> int:  # step 1 fails once
        answered.append(received.body["data"]["step"])
        return 503 if answered == [1] else 200

    receiver.answer = answer
    await endpoint(services, receiver)
    async with services.db.transaction() as conn:  # one fan-out job: [step 1, step 2]
        for step in (1, 2):
            data = {"id": "X", "step": step}
            await emit(conn, "user.updated", account_id=None, actor=ACTOR, data=data)
    await eventually(lambda: receiver.arrived == 1)  # step 1 in flight, held by the gate
    rows = await deliveries(services)
    assert len(rows) == 2 and rows[0]["job_id"] == rows[1]["job_id"]
    first, later = rows[0]["id"], rows[1]["id"]
    park = await aiopg.connect(services.db.dsn, enable_hstore=False)  # dicts stay jsonb
    park_pid = await park.get_backend_pid()
    try:
        async with park.cursor() as cur:
            await cur.execute("BEGIN")
            await cur.execute(SHARE, {"id": first})
            gate.set()  # step 1 answers 503: the settle begins, waits on `first`
            await eventually(lambda: _settle_waits(services, park_pid), within=30)
            await cur.execute(SHARE + " NOWAIT", {"id": later})  # not taken by the settle
            await cur.execute("COMMIT")
    finally:
        park.close()
    await eventually(lambda: len(receiver.accepted) == 2, within=60)  # retried, then sent
    assert answered == [1, 1, 2]


SHARE = "SELECT id FROM webhook_deliveries WHERE id = %(id)s FOR SHARE"


async def _settle_waits(services: Webhooks, park_pid: int) -> bool:
    """Whether another backend waits for a lock the backend `park_pid` holds."""
    waiting = await services.db.fetch_val(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
        " AND %(pid)s = ANY(pg_blocking_pids(pid))",
        {"pid": park_pid},
    )
    return bool(waiting)


async def test_rotation_signs_with_both_secrets_for_a_day(
    services: Webhooks, aiohttp_server: Any
) -> None:
    old_only = await start_receiver(aiohttp_server, [])
    endpoint_id = await endpoint(services, old_only)
    old_secret = old_only.secrets[0]
    rotated = await endpoints.rotate_secret(services, endpoint_id)
    await change(services, "user.updated", "u1")
    await eventually(lambda: old_only.accepted)
    received = old_only.accepted[0]
    assert len(received.signature.split(" ")) == 2
    headers = {
        "webhook-id": received.webhook_id,
        "webhook-timestamp": received.timestamp,
        "webhook-signature": received.signature,
    }
    new_only = Receiver([rotated.secret])
    old = Receiver([old_secret])
    body = _raw(received)
    assert new_only.verify(body, headers) and old.verify(body, headers)
    # After the overlap only the new secret signs.
    await services.db.execute(
        "UPDATE webhook_endpoints SET previous_secret_expires_at = now() - interval '1 second'"
    )
    old_only.secrets = [rotated.secret]
    await change(services, "user.updated", "u2")
    await eventually(lambda: len(old_only.accepted) == 2)
    assert len(old_only.accepted[1].signature.split(" ")) == 1


def _raw(received: Any) -> bytes:
    return orjson.dumps(received.body)


async def test_cloud_metadata_addresses_are_refused(
    services: Webhooks, aiohttp_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    for url in (
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://[::ffff:169.254.169.254]/",
    ):
        with pytest.raises(ValidationFailed):
            await endpoints.add_endpoint(services, url=url)

    class Resolver:
        """DNS that points the receiver's name at the metadata address (a rebinding)."""

        async def resolve(self, host: str, port: int = 0, family: Any = 0) -> list[dict[str, Any]]:
            return [
                {
                    "hostname": host,
                    "host": "169.254.169.254",
                    "port": port,
                    "family": 2,
                    "proto": 6,
                    "flags": 0,
                }
            ]

        async def close(self) -> None:
            pass

    await services.sender.close()
    services.sender = WebhookSender(services.settings, resolver=Resolver())
    receiver = await start_receiver(aiohttp_server, [])
    await endpoints.add_endpoint(
        services, url=f"http://rebound.test:{receiver.url.rsplit(':', 1)[1]}/hook"
    )
    # A row written behind the validation's back is refused at send time too.
    await services.db.execute(
        "INSERT INTO webhook_endpoints (url, secret) VALUES"
        " ('http://169.254.169.254/', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw')"
    )
    await change(services, "user.updated", "u1")
    rows = await eventually(lambda: _attempted(services, 2))
    assert all("metadata" in (r["last_error"] or "") for r in rows), rows
    assert receiver.attempts == []


async def _attempted(services: Webhooks, count: int) -> list[dict[str, Any]] | None:
    rows = await deliveries(services)
    done = [r for r in rows if r["attempts"] > 0]
    return done if len(done) >= count else None


async def test_redirects_are_not_followed(services: Webhooks, aiohttp_server: Any) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    receiver.answer = lambda r: 302
    await endpoint(services, receiver)
    await change(services, "user.updated", "u1")
    rows = await eventually(lambda: _attempted(services, 1))
    assert rows[0]["last_status_code"] == 302 and rows[0]["status"] == "pending"
    assert len(receiver.attempts) == 1  # /elsewhere never asked


async def test_a_delivery_gives_up_after_three_days_and_an_endpoint_is_disabled_after_five(
    app: web.Application,
    services: Webhooks,
    aiohttp_server: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    receiver.answer = lambda r: 500
    endpoint_id = await endpoint(services, receiver)
    await change(services, "user.updated", "u1")
    await eventually(lambda: _attempted(services, 1))
    # Backdate: the delivery has been retried for 3 days, the endpoint failing for 5.
    await services.db.execute(
        "UPDATE webhook_deliveries SET first_attempt_at = now() - interval '3 days'"
    )
    await services.db.execute(
        "UPDATE webhook_endpoints SET failing_since = now() - interval '5 days 1 minute'"
    )
    caplog.set_level(logging.ERROR, logger="tenantd.webhooks.delivery")
    rows = await eventually(
        lambda: services.db.fetch_all("SELECT * FROM webhook_deliveries WHERE status = 'failed'")
    )
    assert rows[0]["attempts"] >= 2
    row = await endpoints.get_endpoint(services, endpoint_id)
    assert row["disabled_at"] is not None
    assert any(r.getMessage() == "webhooks.endpoint_disabled" for r in caplog.records)
    assert services.sender.disabled_endpoints == 1
    assert b"tenantd_webhook_endpoints_disabled_total 1.0" in app[METRICS].render()
    report = await endpoints.status_report(services.db)
    assert report["endpoints"][0]["enabled"] is False
    assert report["endpoints"][0]["failed"] == 1
    # A disabled endpoint gets no new deliveries.
    await change(services, "user.updated", "u2")
    await asyncio.sleep(0.3)
    assert len(await deliveries(services)) == 1


async def test_a_success_clears_a_failing_endpoint(services: Webhooks, aiohttp_server: Any) -> None:
    # The settle step clears `failing_since` only for endpoints its batch saw failing (the
    # others are settled by one statement): an endpoint that failed and then answers is no
    # longer failing, and a later success leaves a healthy one alone.
    receiver = await start_receiver(aiohttp_server, [])
    answers = iter([500])
    receiver.answer = lambda r: next(answers, 204)
    endpoint_id = await endpoint(services, receiver)
    await change(services, "user.updated", "u1")
    await eventually(
        lambda: services.db.fetch_val(
            "SELECT failing_since IS NOT NULL FROM webhook_endpoints WHERE id = %(e)s",
            {"e": endpoint_id},
        )
    )
    await eventually(lambda: _all_settled(services))  # the retry (0.2 s later) succeeds
    # The delivery is on record as soon as it succeeds; its batch's settle clears the
    # endpoint right after.
    await eventually(
        lambda: services.db.fetch_val(
            "SELECT failing_since IS NULL FROM webhook_endpoints WHERE id = %(e)s",
            {"e": endpoint_id},
        )
    )
    await change(services, "user.updated", "u2")
    await eventually(lambda: len(receiver.accepted) == 2)
    await eventually(lambda: _all_settled(services))
    row = await endpoints.get_endpoint(services, endpoint_id)
    assert row["failing_since"] is None and row["disabled_at"] is None


async def test_test_event_and_replay(services: Webhooks, aiohttp_server: Any) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    await change(services, "user.updated", "before")  # before the endpoint existed
    # Fan-out happens when the relay numbers an event: wait for that, or the endpoint made
    # next would already receive it (and the replay below would send it a second time).
    await eventually(
        lambda: services.db.fetch_val(
            "SELECT count(*) > 0 AND bool_and(seq IS NOT NULL) FROM outbox_events"
        )
    )
    endpoint_id = await endpoint(services, receiver)
    event_id = await endpoints.send_test(services, endpoint_id, actor=Actor.operator("ops"))
    await eventually(lambda: receiver.accepted)
    assert receiver.accepted[0].body["type"] == "webhook.test"
    assert receiver.accepted[0].webhook_id == event_id
    since = await services.db.fetch_val("SELECT min(occurred_at) FROM outbox_events")
    count = await endpoints.replay(services, endpoint_id, since=since)
    assert count == 1  # the test event is not replayed
    await eventually(lambda: len(receiver.accepted) == 2)
    assert receiver.accepted[1].body["data"]["id"] == "before"
    await eventually(lambda: _all_settled(services))
    listed = await endpoints.list_deliveries(services, endpoint_id)
    assert {r["status"] for r in listed} == {"delivered"}
