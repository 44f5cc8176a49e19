"""The Python package `tenantd-client` (clients/python, module `tenantd_client`) against a live
`tenantd serve`: access tokens verified from the JWKS (cached; forged and altered tokens
refused; unknown kids refetch at most once per cooldown), send, the events cursor, and a live
webhook delivery verified."""

from __future__ import annotations

import base64
import http.cookiejar
import json
import queue
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.clients.conftest import Seeded
from tests.ui.live import REPO_ROOT, WAIT

sys.path.insert(0, str(REPO_ROOT / "clients" / "python"))
from tenantd_client import (
    JwksCache,
    Tenantd,
    TenantdError,
    TokenError,
    WebhookVerificationError,
    verify_webhook,
)


def b64url(value: Any) -> str:
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def unb64url(text: str) -> Any:
    return json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def sign_in(seeded: Seeded) -> tuple[str, str]:
    """A fresh sign-in of the seeded user: (access token, user id)."""
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    request = urllib.request.Request(
        seeded.server.url("/api/v1/auth/login"),
        data=json.dumps({"email": seeded.email, "password": seeded.password}).encode(),
        headers={"Content-Type": "application/json", "Origin": seeded.server.base},
        method="POST",
    )
    with browser.open(request, timeout=WAIT) as response:
        user = json.loads(response.read())["data"]["user"]
    token = next(cookie.value for cookie in jar if cookie.name == "auth_token")
    assert token
    return token, user["id"]


def test_access_tokens_are_verified_from_the_cached_jwks(seeded: Seeded) -> None:
    token, user_id = sign_in(seeded)
    tenantd = Tenantd(seeded.server.base)
    with ThreadPoolExecutor(8) as pool:
        claims = list(pool.map(tenantd.verify_access_token, [token] * 32))
    assert {c["sub"] for c in claims} == {user_id}
    assert claims[0]["iss"] == "tenantd" and claims[0]["sid"]
    assert tenantd.jwks.fetches == 1, "one fetch for 32 checks on 8 threads"

    header, payload, signature = token.split(".")
    head, body = unb64url(header), unb64url(payload)
    refused = {
        "an altered payload": f"{header}.{b64url({**body, 'sub': 'someone-else'})}.{signature}",
        "a cut signature": f"{header}.{payload}.{signature[:20]}",
        "alg none": f"{b64url({**head, 'alg': 'none'})}.{payload}.",
        "HS256": f"{b64url({**head, 'alg': 'HS256'})}.{payload}.{signature}",
        "not a JWT": "abc",
    }
    for name, bad in refused.items():
        with pytest.raises(TokenError):
            tenantd.verify_access_token(bad)
            pytest.fail(f"{name} was accepted")
    with pytest.raises(TokenError):
        Tenantd(seeded.server.base, issuer="someone").verify_access_token(token)
    with pytest.raises(TokenError):
        Tenantd(seeded.server.base, audience="my-api").verify_access_token(token)


def test_unknown_kids_refetch_at_most_once_per_cooldown(seeded: Seeded) -> None:
    token, _ = sign_in(seeded)
    header, payload, signature = token.split(".")
    forged = f"{b64url({**unb64url(header), 'kid': 'forged'})}.{payload}.{signature}"
    now = [1000.0]
    jwks = JwksCache(seeded.server.url("/.well-known/jwks.json"), clock=lambda: now[0])
    tenantd = Tenantd(seeded.server.base, jwks=jwks)
    tenantd.verify_access_token(token)
    for _ in range(5):
        with pytest.raises(TokenError, match="unknown key"):
            tenantd.verify_access_token(forged)
    assert jwks.fetches == 1
    now[0] += 31
    with pytest.raises(TokenError, match="unknown key"):
        tenantd.verify_access_token(forged)
    assert jwks.fetches == 2
    now[0] += 301
    tenantd.verify_access_token(token)
    assert jwks.fetches == 3, "the keys are fetched again after max_age"


def test_send_is_idempotent_and_refusals_carry_their_code(seeded: Seeded) -> None:
    _, user_id = sign_in(seeded)
    tenantd = Tenantd(seeded.server.base, api_key=seeded.api_key)
    key = f"py-{uuid.uuid4().hex[:12]}"
    sent = tenantd.send(
        "ping.simple", recipient_user_id=user_id, payload={"n": 2}, idempotency_key=key
    )
    assert sent["status"] in ("queued", "created"), sent
    again = tenantd.send(
        "ping.simple", recipient_user_id=user_id, payload={"n": 2}, idempotency_key=key
    )
    assert again["id"] == sent["id"]
    with pytest.raises(TenantdError) as invalid:
        tenantd.send("ping.simple", recipient_user_id=user_id, payload={"n": "many"})
    assert invalid.value.status == 422
    with pytest.raises(TenantdError) as unknown:
        Tenantd(seeded.server.base, api_key="tdk_nope_nope").send(
            "ping.simple", recipient_user_id=user_id, payload={}
        )
    assert unknown.value.status == 401


def test_the_events_cursor_reads_everything_once_and_stays_put(seeded: Seeded) -> None:
    tenantd = Tenantd(seeded.server.base, api_key=seeded.api_key)
    seen: list[dict[str, Any]] = []
    cursor = None
    for page in tenantd.event_pages(limit=2):
        seen.extend(page["items"])
        cursor = page["nextCursor"]
    assert any(event["type"] == "user.created" for event in seen), seen
    assert len({event["id"] for event in seen}) == len(seen)
    after = tenantd.events(cursor)
    assert after["items"] == [] and after["nextCursor"] == cursor
    typed = tenantd.events(types=["user.created"])
    assert typed["items"] and all(e["type"] == "user.created" for e in typed["items"])


@pytest.fixture
def receiver() -> Iterator[tuple[str, queue.Queue[tuple[dict[str, str], bytes]]]]:
    received: queue.Queue[tuple[dict[str, str], bytes]] = queue.Queue()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.put((dict(self.headers.items()), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hooks/tenantd", received
    finally:
        server.shutdown()
        server.server_close()


def test_a_live_webhook_is_verified_and_tampering_refused(
    seeded: Seeded, receiver: tuple[str, queue.Queue[tuple[dict[str, str], bytes]]]
) -> None:
    url, received = receiver
    tenantd = Tenantd(seeded.server.base, api_key=seeded.api_key)
    created = tenantd._call("POST", "/api/v1/webhook-endpoints", {"url": url})
    secret = created["secret"]
    tenantd._call("POST", f"/api/v1/webhook-endpoints/{created['endpoint']['id']}/test")
    headers, body = received.get(timeout=WAIT)

    event = verify_webhook(secret, headers, body)
    assert event["type"] == "webhook.test"
    lowered = {name.lower(): value for name, value in headers.items()}
    assert event["id"] == lowered["webhook-id"]
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, headers, body.replace(b"webhook.test", b"webhook.tesT"))
    other = "whsec_" + base64.b64encode(b"another secret of 24 by").decode()
    with pytest.raises(WebhookVerificationError):
        verify_webhook(other, headers, body)
    stale = {k: v for k, v in headers.items() if k.lower() != "webhook-timestamp"}
    stale["webhook-timestamp"] = str(int(time.time()) - 600)
    with pytest.raises(WebhookVerificationError):
        verify_webhook(secret, stale, body)


def test_es256_tokens_verify_and_a_key_serves_only_its_alg() -> None:
    """ACCESS_TOKEN_ALG=ES256: a P-256 key in a JWKS served locally, tokens signed by PyJWT."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec

    private = ec.generate_private_key(ec.SECP256R1())
    public = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(private.public_key()))
    document = json.dumps({"keys": [{**public, "kid": "es-1", "alg": "ES256", "use": "sig"}]})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(document.encode())

        def log_message(self, *_args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        tenantd = Tenantd(f"http://127.0.0.1:{server.server_address[1]}")
        now = int(time.time())
        claims = {"sub": "u1", "sid": "s1", "jti": "j1", "iat": now, "exp": now + 60}
        claims["iss"] = "tenantd"
        token = jwt.encode(claims, private, algorithm="ES256", headers={"kid": "es-1"})
        assert tenantd.verify_access_token(token)["sub"] == "u1"
        forged = jwt.encode(claims, "x" * 32, algorithm="HS256", headers={"kid": "es-1"})
        with pytest.raises(TokenError, match="not accepted"):
            tenantd.verify_access_token(forged)
        no_sid = jwt.encode(
            {k: v for k, v in claims.items() if k != "sid"},
            private,
            algorithm="ES256",
            headers={"kid": "es-1"},
        )
        with pytest.raises(TokenError, match="sid"):
            tenantd.verify_access_token(no_sid)
        assert tenantd.jwks.fetches == 1
    finally:
        server.shutdown()
        server.server_close()
