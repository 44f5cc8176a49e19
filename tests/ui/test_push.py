"""Browser push opt-in in Chromium: the page registers the service worker, asks for permission,
subscribes with the server's VAPID key and stores the subscription; a notification is then
pushed, encrypted, to the local fake push service.

Chromium's own push service is Google's, which a test cannot reach, so the browser's
`PushManager.subscribe` is replaced by one that returns a subscription at the local fake
(the keys are the test's, so it can decrypt what arrives)."""

from __future__ import annotations

import base64
import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import http_ece
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from playwright.sync_api import BrowserContext, Page, expect

from tenantd.cli.vapid import generate_keys
from tests.ui.live import LiveServer, shoot, sign_up, unique_email

VAPID_PUBLIC, VAPID_PRIVATE = generate_keys()


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


class FakePush:
    """A push service on a thread: records each POST (path, headers, body) and answers 201."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict[str, str], bytes]] = []
        self.arrived = threading.Condition()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with fake.arrived:
                    fake.received.append((self.path, dict(self.headers), body))
                    fake.arrived.notify_all()
                self.send_response(201)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def wait(self, count: int, within: float = 30.0) -> list[tuple[str, dict[str, str], bytes]]:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.received) >= count, within)
            return list(self.received)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def fake_push() -> Iterator[FakePush]:
    fake = FakePush()
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture(scope="module")
def live_env(fake_push: FakePush) -> dict[str, str]:
    return {
        "WEB_PUSH_VAPID_PUBLIC_KEY": VAPID_PUBLIC,
        "WEB_PUSH_VAPID_PRIVATE_KEY": VAPID_PRIVATE,
        "WEB_PUSH_VAPID_SUBJECT": "mailto:ops@example.com",
        "WEB_PUSH_ALLOWED_HOSTS": f"fcm.googleapis.com,{fake_push.base}",
    }


FAKE_SUBSCRIBE = """
(() => {
  const endpoint = %(endpoint)s, keys = %(keys)s;
  const subscription = {
    endpoint, expirationTime: null,
    toJSON() { return { endpoint, expirationTime: null, keys }; },
    unsubscribe: async () => true,
  };
  let subscribed = false;
  PushManager.prototype.subscribe = async function (options) {
    const key = new Uint8Array(options.applicationServerKey);
    window.__pushKey = btoa(String.fromCharCode(...key))
      .replace(/\\+/g, '-').replace(/\\//g, '_').replace(/=+$/, '');
    window.__userVisibleOnly = options.userVisibleOnly;
    subscribed = true;
    return subscription;
  };
  PushManager.prototype.getSubscription = async function () {
    return subscribed ? subscription : null;
  };
})();
"""


def test_push_opt_in_registers_the_service_worker_and_receives_a_push(
    context: BrowserContext, page: Page, live: LiveServer, fake_push: FakePush
) -> None:
    private_key = ec.generate_private_key(ec.SECP256R1())
    auth = os.urandom(16)
    p256dh = b64url(
        private_key.public_key().public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
    )
    endpoint = f"{fake_push.base}/push/browser-1"
    context.grant_permissions(["notifications"], origin=live.base)
    context.add_init_script(
        FAKE_SUBSCRIBE
        % {
            "endpoint": json.dumps(endpoint),
            "keys": json.dumps({"p256dh": p256dh, "auth": b64url(auth)}),
        }
    )
    sign_up(page, live, unique_email("push"))
    page.goto("/notifications")
    button = page.get_by_role("button", name="Turn on browser notifications")
    expect(button).to_be_visible()
    shoot(page, "notifications-push")
    button.click()
    expect(page.get_by_text("Browser notifications are on for this device.")).to_be_visible()

    assert page.evaluate("window.__pushKey") == VAPID_PUBLIC
    assert page.evaluate("window.__userVisibleOnly") is True
    scope = page.evaluate(
        "navigator.serviceWorker.getRegistration().then(r => r && r.active && r.scope)"
    )
    assert scope == live.base + "/"
    stored = page.request.get("/api/v1/notifications/push/subscriptions").json()["data"]
    assert [s["endpoint"] for s in stored] == [endpoint]

    me = page.request.get("/api/v1/users/me").json()
    payload = {"actorId": "x", "commentId": "push-1", "text": "Pushed to the browser"}
    live.cli(
        "notify",
        "send",
        "comment.created",
        "--user",
        me["user"]["id"],
        "--payload",
        json.dumps(payload),
    )
    path, headers, body = fake_push.wait(1)[0]
    assert path == "/push/browser-1"
    assert headers["Content-Encoding"] == "aes128gcm"
    plain = http_ece.decrypt(body, private_key=private_key, auth_secret=auth, version="aes128gcm")
    message = json.loads(plain)
    assert message["notification"]["title"] == "New comment"
    assert message["notification"]["body"] == "Pushed to the browser"
