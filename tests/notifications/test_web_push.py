"""Web push: subscriptions (SSRF policy, key checks, upsert, per-user cap), delivery through a
local fake push service that decrypts what it receives, message size, expiry cleanup, failure
modes, bounded VAPID caches."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from typing import Any

import http_ece
import jwt
import pytest
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from tenantd.cli.vapid import generate_keys
from tenantd.notifications import send
from tenantd.notifications.channels.web_push import vapid
from tenantd.notifications.channels.web_push.delivery import EXPIRED_EVENT
from tenantd.notifications.channels.web_push.vapid import VapidSigner
from tenantd.notifications.domain import Notifications
from tenantd.settings import Settings
from tests.notifications.support import EVENT_MODULE, deliveries, quiesce

BASE = "/api/v1/notifications/push"
VAPID_PUBLIC, VAPID_PRIVATE = generate_keys()
# Each send's timeout. The fake push service answers from this same process, so on a busy
# machine an ordinary answer may take a while (a CI run saw one over 2 s at load 11); "slow"
# endpoints answer a second after it.
PUSH_TIMEOUT = 8.0
BOTH_MODES = pytest.mark.parametrize("queues_enabled", [False, True], ids=["inline", "queued"])


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


@dataclass
class Subscriber:
    """A browser's push keys: the test decrypts with the private half."""

    private_key: ec.EllipticCurvePrivateKey = field(
        default_factory=lambda: ec.generate_private_key(ec.SECP256R1())
    )
    auth: bytes = field(default_factory=lambda: os.urandom(16))

    @property
    def p256dh(self) -> str:
        return b64url(
            self.private_key.public_key().public_bytes(
                serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
            )
        )

    def body(self, endpoint: str) -> dict[str, Any]:
        return {
            "endpoint": endpoint,
            "expirationTime": None,
            "keys": {"p256dh": self.p256dh, "auth": b64url(self.auth)},
        }

    def decrypt(self, data: bytes) -> bytes:
        return bytes(
            http_ece.decrypt(
                data, private_key=self.private_key, auth_secret=self.auth, version="aes128gcm"
            )
        )


class FakePushService:
    """Speaks the push protocol: 201 accepted, or the status a path asks for."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.arrived: list[float] = []  # loop time of each request's arrival
        self.base = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        self.arrived.append(asyncio.get_running_loop().time())
        self.received.append((name, dict(request.headers), await request.read()))
        if name.startswith("gone"):
            return web.Response(status=410)
        if name.startswith("missing"):
            return web.Response(status=404)
        if name.startswith("boom"):
            return web.Response(status=500)
        if name.startswith("redirect"):
            raise web.HTTPFound(f"{self.base}/push/redirect-target")
        if name.startswith("slow"):
            await asyncio.sleep(PUSH_TIMEOUT + 1)
        return web.Response(status=201)

    def names(self) -> list[str]:
        return [name for name, _, _ in self.received]


@pytest.fixture
async def push_service(aiohttp_server: Any) -> FakePushService:
    fake = FakePushService()
    app = web.Application()
    app.router.add_post("/push/{name}", fake.handle)
    server = await aiohttp_server(app)
    fake.base = f"http://127.0.0.1:{server.port}"
    return fake


@pytest.fixture
def push_enabled() -> bool:
    return True


@pytest.fixture
def env(env: dict[str, str], push_service: FakePushService, push_enabled: bool) -> dict[str, str]:
    if push_enabled:
        env["WEB_PUSH_VAPID_PUBLIC_KEY"] = VAPID_PUBLIC
        env["WEB_PUSH_VAPID_PRIVATE_KEY"] = VAPID_PRIVATE
        env["WEB_PUSH_VAPID_SUBJECT"] = "mailto:ops@example.com"
    env["WEB_PUSH_ALLOWED_HOSTS"] = (
        f"fcm.googleapis.com,*.push.apple.com,{push_service.base},https://10.9.9.9"
    )
    env["TENANTD_WEB_PUSH_TIMEOUT_SECONDS"] = str(PUSH_TIMEOUT)
    env["TENANTD_EVENT_MODULES"] = f"{EVENT_MODULE},tests.notifications.push_events_fixture"
    return env


async def subscribe(client: Any, body: dict[str, Any], status: int = 200) -> Any:
    response = await client.post(f"{BASE}/subscribe", json=body)
    payload = await response.json()
    assert response.status == status, payload
    return payload


def comment() -> dict[str, Any]:
    return {"actorId": str(uuid.uuid4()), "commentId": uuid.uuid4().hex, "text": "pushed"}


@BOTH_MODES
async def test_push_is_encrypted_for_the_subscriber_and_signed_with_vapid(
    services: Notifications,
    factory: Any,
    make_client: Any,
    push_service: FakePushService,
    queues_enabled: bool,
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    browser = Subscriber()
    await subscribe(client, browser.body(f"{push_service.base}/push/ok"))
    outcome = await send(services, "comment.created", recipient_user_id=user.id, payload=comment())
    await quiesce(services)
    assert (await deliveries(services, outcome.notification_id))["web_push"] == ("sent", None)
    [(name, headers, body)] = push_service.received
    assert name == "ok"
    assert headers["Content-Encoding"] == "aes128gcm"
    assert int(headers["TTL"]) > 0
    envelope = json.loads(browser.decrypt(body))
    assert envelope["type"] == "notification.created"
    notification = envelope["notification"]
    assert notification["id"] == str(outcome.notification_id)
    assert notification["title"] == "New comment" and notification["body"] == "pushed"
    assert set(notification) == {
        "id",
        "eventType",
        "title",
        "body",
        "ctaUrl",
        "ctaLabel",
        "status",
        "readAt",
        "createdAt",
    }
    # RFC 8292: vapid t=<JWT signed by our key>, k=<our public key>
    scheme, _, params = headers["Authorization"].partition(" ")
    assert scheme == "vapid"
    parts = dict(part.split("=", 1) for part in params.split(","))
    assert parts["k"] == VAPID_PUBLIC
    public = ec.EllipticCurvePublicKey.from_encoded_point(
        ec.SECP256R1(), base64.urlsafe_b64decode(VAPID_PUBLIC + "==")
    )
    claims = jwt.decode(parts["t"], public, algorithms=["ES256"], audience=push_service.base)
    assert claims["sub"] == "mailto:ops@example.com"
    # A different subscriber cannot read it.
    with pytest.raises(Exception):  # noqa: B017 - any decryption failure will do
        Subscriber().decrypt(body)
    used = await services.db.fetch_val("SELECT last_used_at FROM push_subscriptions")
    assert used is not None


async def test_expired_subscriptions_are_deleted_and_logged(
    services: Notifications,
    factory: Any,
    make_client: Any,
    push_service: FakePushService,
    caplog: pytest.LogCaptureFixture,
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    await subscribe(client, Subscriber().body(f"{push_service.base}/push/gone"))
    await subscribe(client, Subscriber().body(f"{push_service.base}/push/missing"))
    with caplog.at_level(logging.INFO, logger="tenantd.notifications.channels.web_push.delivery"):
        outcome = await send(
            services, "comment.created", recipient_user_id=user.id, payload=comment()
        )
        await quiesce(services)
    assert sorted(push_service.names()) == ["gone", "missing"]
    assert await services.db.fetch_val("SELECT count(*) FROM push_subscriptions") == 0
    expired = [r for r in caplog.records if r.getMessage() == EXPIRED_EVENT]
    assert len(expired) == 2
    assert EXPIRED_EVENT == "notifications.web_push.subscription_expired"
    # Nothing live was left to accept it.
    assert (await deliveries(services, outcome.notification_id))["web_push"] == (
        "suppressed",
        "no_live_subscriptions",
    )


async def test_delivery_outcomes(
    services: Notifications, factory: Any, make_client: Any, push_service: FakePushService
) -> None:
    async def deliver(*names: str) -> tuple[str, Any]:
        user = await factory.user()
        client = await make_client(cookies=await factory.cookies(user))
        for name in names:
            await subscribe(client, Subscriber().body(f"{push_service.base}/push/{name}"))
        outcome = await send(
            services, "comment.created", recipient_user_id=user.id, payload=comment()
        )
        await quiesce(services)
        return (await deliveries(services, outcome.notification_id))["web_push"]

    assert await deliver() == ("suppressed", "no_subscriptions")
    assert await deliver("boom1") == ("failed", "http_500")
    assert await deliver("ok-a", "boom2") == ("sent", None)  # any accepted -> sent
    assert await deliver("slow") == ("failed", "timeout")
    # A redirect is an error and is never followed (the target is never contacted).
    assert await deliver("redirect") == ("failed", "http_302")
    assert "redirect-target" not in push_service.names()


async def test_sends_run_in_parallel(
    services: Notifications, factory: Any, make_client: Any, push_service: FakePushService
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    for n in range(4):
        await subscribe(client, Subscriber().body(f"{push_service.base}/push/slow{n}"))
    await send(services, "comment.created", recipient_user_id=user.id, payload=comment())
    await quiesce(services)
    assert len(push_service.received) == 4
    # Four sends each cut at the timeout. One after the other, the last would start at least
    # 3 timeouts after the first; in parallel, all four reach the push service before the
    # first one's timeout runs out (however long the rest of the dispatch takes).
    assert max(push_service.arrived) - min(push_service.arrived) < PUSH_TIMEOUT


async def test_subscribe_upserts_rotates_keys_lists_and_deletes(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    endpoint = "https://web.push.apple.com/QGuQyavXutnMH7D9"
    first, second = Subscriber(), Subscriber()
    created = (await subscribe(client, first.body(endpoint)))["data"]
    assert created["endpoint"] == endpoint and "keys" not in created
    again = (await subscribe(client, second.body(endpoint)))["data"]
    assert again["id"] == created["id"]
    row = await services.db.fetch_one("SELECT * FROM push_subscriptions")
    assert row is not None
    assert (row["p256dh_key"], row["auth_key"]) == (second.p256dh, b64url(second.auth))
    listing = await (await client.get(f"{BASE}/subscriptions")).json()
    assert [s["endpoint"] for s in listing["data"]] == [endpoint]
    # Expiration time (ms since the epoch) is kept.
    body = first.body("https://fcm.googleapis.com/fcm/send/abc")
    body["expirationTime"] = 1_900_000_000_000
    stored = (await subscribe(client, body))["data"]
    assert stored["expiresAt"].startswith("2030-03-17")
    # Another user's list is their own.
    other = await make_client(cookies=await factory.cookies(await factory.user()))
    assert (await (await other.get(f"{BASE}/subscriptions")).json())["data"] == []
    response = await client.delete(f"{BASE}/subscribe", json={"endpoint": endpoint})
    assert (await response.json())["data"] == {"removed": True}
    response = await client.delete(f"{BASE}/subscribe", json={"endpoint": endpoint})
    assert (await response.json())["data"] == {"removed": False}
    assert await services.db.fetch_val("SELECT count(*) FROM push_subscriptions") == 1


async def test_another_user_subscribing_the_same_endpoint_leaves_the_first_users_row(
    services: Notifications, factory: Any, make_client: Any, push_service: FakePushService
) -> None:
    """Uniqueness is (userId, endpoint): a browser profile two people sign in to is theirs both."""
    endpoint = f"{push_service.base}/push/shared-browser"
    alice_user, bob_user = await factory.user(), await factory.user()
    alice = await make_client(cookies=await factory.cookies(alice_user))
    bob = await make_client(cookies=await factory.cookies(bob_user))
    alice_keys, bob_keys = Subscriber(), Subscriber()
    await subscribe(alice, alice_keys.body(endpoint))
    await subscribe(bob, bob_keys.body(endpoint))
    rows = await services.db.fetch_all(
        "SELECT user_id, p256dh_key FROM push_subscriptions ORDER BY created_at"
    )
    assert [(r["user_id"], r["p256dh_key"]) for r in rows] == [
        (alice_user.id, alice_keys.p256dh),
        (bob_user.id, bob_keys.p256dh),
    ]
    # Alice still gets her pushes, encrypted for her keys.
    await send(services, "comment.created", recipient_user_id=alice_user.id, payload=comment())
    await quiesce(services)
    [(_name, _headers, body)] = push_service.received
    assert json.loads(alice_keys.decrypt(body))["type"] == "notification.created"
    # Bob unsubscribing removes only his row.
    response = await bob.delete(f"{BASE}/subscribe", json={"endpoint": endpoint})
    assert (await response.json())["data"] == {"removed": True}
    remaining = await services.db.fetch_all("SELECT user_id FROM push_subscriptions")
    assert [r["user_id"] for r in remaining] == [alice_user.id]


async def endpoints_of(services: Notifications, user_id: uuid.UUID) -> list[str]:
    rows = await services.db.fetch_all(
        "SELECT endpoint FROM push_subscriptions WHERE user_id = %(u)s ORDER BY created_at",
        {"u": user_id},
    )
    return [r["endpoint"] for r in rows]


async def test_the_21st_subscription_replaces_the_oldest(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    user, other = await factory.user(), await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    other_client = await make_client(cookies=await factory.cookies(other))
    await subscribe(other_client, Subscriber().body("https://fcm.googleapis.com/fcm/send/other"))
    endpoints = [f"https://fcm.googleapis.com/fcm/send/device-{n}" for n in range(21)]
    for endpoint in endpoints[:20]:  # the default cap
        await subscribe(client, Subscriber().body(endpoint))
    assert await endpoints_of(services, user.id) == endpoints[:20]
    # Re-subscribing a known endpoint at the cap rotates its keys and removes nothing.
    await subscribe(client, Subscriber().body(endpoints[0]))
    assert await endpoints_of(services, user.id) == endpoints[:20]
    await subscribe(client, Subscriber().body(endpoints[20]))
    assert await endpoints_of(services, user.id) == endpoints[1:]
    # Another user's subscriptions do not count and are not touched.
    assert len(await endpoints_of(services, other.id)) == 1


async def test_concurrent_subscribes_by_one_user_never_exceed_the_cap(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    bodies = [
        Subscriber().body(f"https://fcm.googleapis.com/fcm/send/parallel-{n}") for n in range(40)
    ]
    responses = await asyncio.gather(
        *(client.post(f"{BASE}/subscribe", json=body) for body in bodies)
    )
    assert [r.status for r in responses] == [200] * 40
    assert len(await endpoints_of(services, user.id)) == 20
    listed = await (await client.get(f"{BASE}/subscriptions")).json()
    assert len(listed["data"]) == 20


@pytest.mark.parametrize(
    ("endpoint", "why"),
    [
        ("https://10.0.0.1/push/x", "IP address"),
        ("https://[::1]/push/x", "IP address"),
        ("https://169.254.169.254/latest/meta-data", "IP address"),
        ("http://fcm.googleapis.com/fcm/send/x", "https"),
        ("https://evil.example.com/push", "not an allowed"),
        ("https://push.apple.com/x", "not an allowed"),  # the wildcard needs a subdomain
        ("https://evilpush.apple.com/x", "not an allowed"),
        ("https://fcm.googleapis.com.evil.example/x", "not an allowed"),
        ("https://fcm.googleapis.com:8443/x", "not an allowed"),
        ("https://user:pw@fcm.googleapis.com/x", "credentials"),
        ("ftp://fcm.googleapis.com/x", "https"),
        ("file:///etc/passwd", "https"),
        ("http://127.0.0.1:1/push/x", "https"),  # only the listed http host:port
        ("not a url", "https"),
    ],
)
async def test_ssrf_refusals(
    services: Notifications, factory: Any, make_client: Any, endpoint: str, why: str
) -> None:
    client = await make_client(cookies=await factory.cookies(await factory.user()))
    payload = await subscribe(client, Subscriber().body(endpoint), status=422)
    assert why in payload["error"]["details"]["fields"]["endpoint"]
    assert await services.db.fetch_val("SELECT count(*) FROM push_subscriptions") == 0


async def test_listed_ip_literal_and_wildcards_are_accepted(factory: Any, make_client: Any) -> None:
    client = await make_client(cookies=await factory.cookies(await factory.user()))
    for endpoint in [
        "https://10.9.9.9/push/x",  # listed explicitly
        "https://web.push.apple.com/x",
        "https://a.b.push.apple.com/x",
        "https://FCM.googleapis.com:443/fcm/send/x",
    ]:
        await subscribe(client, Subscriber().body(endpoint))


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"p256dh": b64url(b"\x04" + b"\x01" * 63), "auth": b64url(b"a" * 16)}, "keys.p256dh"),
        ({"p256dh": b64url(b"\x04" + b"\x01" * 64), "auth": b64url(b"a" * 16)}, "keys.p256dh"),
        ({"p256dh": "!!not-base64!!", "auth": b64url(b"a" * 16)}, "keys.p256dh"),
        ({"p256dh": None, "auth": b64url(b"a" * 15)}, "keys.auth"),
        ({"p256dh": None, "auth": b64url(b"a" * 17)}, "keys.auth"),
        ({"p256dh": None, "auth": "a+b/"}, "keys.auth"),
    ],
)
async def test_key_formats_are_checked(
    factory: Any, make_client: Any, keys: dict[str, Any], field: str
) -> None:
    client = await make_client(cookies=await factory.cookies(await factory.user()))
    body = Subscriber().body("https://fcm.googleapis.com/fcm/send/x")
    body["keys"].update({k: v for k, v in keys.items() if v is not None})
    payload = await subscribe(client, body, status=422)
    assert field in payload["error"]["details"]["fields"]


async def test_vapid_public_key_route(factory: Any, make_client: Any, client: Any) -> None:
    signed = await make_client(cookies=await factory.cookies(await factory.user()))
    response = await signed.get(f"{BASE}/vapid-public-key")
    assert (await response.json())["data"] == {"publicKey": VAPID_PUBLIC}
    assert (await client.get(f"{BASE}/vapid-public-key")).status == 401


@pytest.mark.parametrize("push_enabled", [False])
async def test_push_does_not_exist_without_vapid(
    services: Notifications, factory: Any, make_client: Any
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    assert (await client.get(f"{BASE}/vapid-public-key")).status == 404
    assert (await client.get(f"{BASE}/subscriptions")).status == 404
    body = Subscriber().body("https://fcm.googleapis.com/fcm/send/x")
    assert (await client.post(f"{BASE}/subscribe", json=body)).status == 404
    outcome = await send(services, "comment.created", recipient_user_id=user.id, payload=comment())
    await quiesce(services)
    assert "web_push" not in await deliveries(services, outcome.notification_id)


@pytest.mark.parametrize(
    "text",
    ["a" * 5000, "\U0001f514" * 5000, 'é"\\\n' * 1250],
    ids=["ascii", "emoji", "escaped"],
)
async def test_a_long_body_is_cut_to_fit_a_4096_byte_message(
    services: Notifications,
    factory: Any,
    make_client: Any,
    push_service: FakePushService,
    text: str,
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    browser = Subscriber()
    await subscribe(client, browser.body(f"{push_service.base}/push/ok"))
    outcome = await send(
        services,
        "bulletin.posted",
        recipient_user_id=user.id,
        payload={"title": "Quarterly letter", "text": text},
    )
    await quiesce(services)
    assert (await deliveries(services, outcome.notification_id))["web_push"] == ("sent", None)
    [(_name, headers, body)] = push_service.received
    assert len(body) <= 4096  # the whole encrypted request body
    assert len(body) > 4096 - 8  # and no more was cut than needed
    assert int(headers["Content-Length"]) == len(body)
    envelope = json.loads(browser.decrypt(body))
    assert envelope["type"] == "notification.created"
    assert envelope["truncated"] is True
    notification = envelope["notification"]
    assert notification["id"] == str(outcome.notification_id)
    assert notification["eventType"] == "bulletin.posted"
    assert notification["title"] == "Quarterly letter"
    assert notification["ctaUrl"] == "/bulletins/latest"
    assert len(notification["body"]) > 100 and text.startswith(notification["body"])
    # The inbox keeps the whole body.
    stored = await services.db.fetch_val(
        "SELECT body FROM notifications WHERE id = %(id)s", {"id": outcome.notification_id}
    )
    assert stored == text


async def test_huge_title_and_body_still_fit_and_keep_the_id(
    services: Notifications, factory: Any, make_client: Any, push_service: FakePushService
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    browser = Subscriber()
    await subscribe(client, browser.body(f"{push_service.base}/push/ok"))
    outcome = await send(
        services,
        "bulletin.posted",
        recipient_user_id=user.id,
        payload={"title": "\U0001f4e3" * 5000, "text": "b" * 5000},
    )
    await quiesce(services)
    [(_name, _headers, body)] = push_service.received
    assert len(body) <= 4096
    envelope = json.loads(browser.decrypt(body))
    notification = envelope["notification"]
    assert envelope["truncated"] is True
    assert notification["id"] == str(outcome.notification_id)
    assert notification["body"] == ""
    title = notification["title"]
    assert 0 < len(title) < 5000 and ("\U0001f4e3" * 5000).startswith(title)


async def test_a_message_that_fits_is_sent_whole(
    services: Notifications, factory: Any, make_client: Any, push_service: FakePushService
) -> None:
    user = await factory.user()
    client = await make_client(cookies=await factory.cookies(user))
    browser = Subscriber()
    await subscribe(client, browser.body(f"{push_service.base}/push/ok"))
    text = "c" * 3000
    await send(
        services,
        "bulletin.posted",
        recipient_user_id=user.id,
        payload={"title": "Short enough", "text": text},
    )
    await quiesce(services)
    [(_name, _headers, body)] = push_service.received
    envelope = json.loads(browser.decrypt(body))
    assert "truncated" not in envelope
    assert envelope["notification"]["body"] == text


def test_the_vapid_header_cache_is_bounded_per_audience() -> None:
    signer = VapidSigner(VAPID_PRIVATE, "mailto:ops@example.com")
    size = vapid.VAPID_AUDIENCES_CACHED
    for n in range(size + 25):
        signer.headers(f"https://h{n}.push.apple.com/push/{n}")
    assert len(signer._cache) == size
    # Least recently used leave first: the first hosts are gone, the latest are served cached.
    assert "https://h0.push.apple.com" not in signer._cache
    latest = f"https://h{size + 24}.push.apple.com/push/again"
    assert signer.headers(latest) is signer.headers(latest)
    # A hit refreshes an entry, so it outlives newer ones.
    signer.headers(f"https://h{size}.push.apple.com/x")
    for n in range(size - 1):
        signer.headers(f"https://other{n}.push.apple.com/x")
    assert f"https://h{size}.push.apple.com" in signer._cache
    assert len(signer._cache) == size


def test_the_signer_cache_is_bounded(settings: Settings) -> None:
    for _ in range(vapid.SIGNERS_CACHED + 3):
        public, private = generate_keys()
        configured = settings.replaced(
            settings.notifications.model_copy(
                update={"vapid_public_key": public, "vapid_private_key": private}
            )
        )
        assert vapid.signer(configured) is vapid.signer(configured)
    assert len(vapid._SIGNERS) == vapid.SIGNERS_CACHED
