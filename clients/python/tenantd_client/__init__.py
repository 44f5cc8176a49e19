"""tenantd for Python backends: verify access tokens against tenantd's JWKS (cached), send
notifications, read the events API with its cursor, and verify webhooks (Standard Webhooks).

    tenantd = Tenantd("https://auth.example.com", api_key=os.environ["TENANTD_API_KEY"])
    claims = tenantd.verify_access_token(token)          # raises TokenError
    tenantd.send("comment.created", recipient_user_id=claims["sub"], payload={...})

Blocking calls on the standard library's HTTP client (thread-safe; from asyncio code, run them
with `asyncio.to_thread`). `verify_access_token` makes no request while the keys are cached.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypedDict

import jwt
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

__all__ = [
    "ALGORITHMS",
    "EventPage",
    "JwksCache",
    "SendResult",
    "Tenantd",
    "TenantdError",
    "TokenError",
    "WebhookVerificationError",
    "verify_webhook",
]

ALGORITHMS = ("EdDSA", "ES256")  # ACCESS_TOKEN_ALG; HS256 has no public key to check
REQUIRED_CLAIMS = ["exp", "iat", "sub", "sid"]
USER_AGENT = "tenantd-client-python/0.1.0"


class TokenError(Exception):
    """Not a valid tenantd access token (signature, key, algorithm, expiry, issuer...)."""


class TenantdError(Exception):
    """An error answer of tenantd's API: `status`, `code` (e.g. `INSUFFICIENT_SCOPE`),
    `details`, and `retry_after` (seconds) when tenantd sent one."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Any = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        self.retry_after = retry_after


class SendResult(TypedDict):
    id: str
    status: str


class EventPage(TypedDict):
    items: list[dict[str, Any]]
    nextCursor: str
    hasMore: bool


class JwksCache:
    """tenantd's signing keys from `jwks_url`, kept `max_age` seconds (the JWKS's own
    Cache-Control). An unknown `kid` (a key rotated in since) refetches at once, but at most
    once per `cooldown` seconds, so forged kids cannot make it hammer tenantd. One fetch at a
    time (a lock)."""

    def __init__(
        self,
        jwks_url: str,
        *,
        max_age: float = 300.0,
        cooldown: float = 30.0,
        timeout: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = jwks_url
        self.max_age = max_age
        self.cooldown = cooldown
        self.timeout = timeout
        self.clock = clock
        self.fetches = 0
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at = float("-inf")
        self._lock = threading.Lock()

    def key(self, kid: str) -> jwt.PyJWK | None:
        """The public key named `kid`, or None when tenantd does not publish it."""
        with self._lock:
            age = self.clock() - self._fetched_at
            if age >= self.max_age or (kid not in self._keys and age >= self.cooldown):
                self._load()
            return self._keys.get(kid)

    def _load(self) -> None:
        self.fetches += 1
        request = urllib.request.Request(
            self.url, headers={"Accept": "application/json", "User-Agent": USER_AGENT}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                document = json.loads(response.read())
        except (urllib.error.URLError, TimeoutError, ValueError) as exc:
            raise TokenError(f"the JWKS could not be read: {exc}") from exc
        keys: dict[str, jwt.PyJWK] = {}
        for entry in document.get("keys", []) if isinstance(document, dict) else []:
            if not isinstance(entry, dict) or entry.get("alg") not in ALGORITHMS:
                continue
            try:
                key = jwt.PyJWK(entry)
            except jwt.PyJWKError:
                continue
            if key.key_id:
                keys[key.key_id] = key
        self._keys = keys
        self._fetched_at = self.clock()


def verify_webhook(secret: str, headers: Mapping[str, str], body: bytes | str) -> dict[str, Any]:
    """A webhook delivery's event, after checking it with Standard Webhooks: a `v1` signature
    (HMAC-SHA256 of `id.timestamp.body` keyed with the `whsec_` secret; either of two during a
    rotation; compared in constant time) and `webhook-timestamp` within 5 minutes of now.
    `body` is the raw body as received. Raises WebhookVerificationError."""
    lowered = {name.lower(): value for name, value in headers.items()}
    event = Webhook(secret).verify(body, lowered)
    if not isinstance(event, dict):
        raise WebhookVerificationError("The body is not an event")
    return event


class Tenantd:
    """tenantd for a backend. `base_url`: tenantd's PUBLIC_BASE_URL; `api_key`: `tdk_...`
    with the scopes the calls need (`notifications:send`, `events:read`)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        issuer: str = "tenantd",
        audience: str | None = None,
        timeout: float = 10.0,
        jwks: JwksCache | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.issuer = issuer
        self.audience = audience
        self.timeout = timeout
        self.jwks = jwks or JwksCache(f"{self.base_url}/.well-known/jwks.json", timeout=timeout)

    def verify_access_token(
        self,
        token: str,
        *,
        leeway: float = 5.0,
        algorithms: tuple[str, ...] = ALGORITHMS,
    ) -> dict[str, Any]:
        """The claims of a tenantd access token (the `auth_token` cookie or a bearer token):
        `{sub, sid, aid, jti, iat, exp, iss, ...}`. Raises TokenError."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as exc:
            raise TokenError(f"malformed token: {exc}") from exc
        alg, kid = header.get("alg"), header.get("kid")
        if alg not in algorithms:
            raise TokenError(f"algorithm {alg!r} is not accepted")
        if not isinstance(kid, str):
            raise TokenError("no kid")
        key = self.jwks.key(kid)
        if key is None:
            raise TokenError("signed by an unknown key")
        if key.algorithm_name != alg:
            raise TokenError("the key is not for this algorithm")
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=[alg],
                issuer=self.issuer,
                audience=self.audience,
                leeway=leeway,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.InvalidTokenError as exc:
            raise TokenError(str(exc)) from exc
        return claims

    def _call(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        if not self.api_key:
            raise ValueError("api_key is required for server routes")
        sent = {
            "Accept": "application/json",
            "Authorization": f"Bearer {self.api_key}",
            "User-Agent": USER_AGENT,
            **(headers or {}),
        }
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self.base_url + path, data=data, headers=sent, method=method
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise _error(exc) from None
        answer = json.loads(raw) if raw else None
        if isinstance(answer, dict) and "success" in answer and "data" in answer:
            return answer["data"]
        return answer

    def send(
        self,
        type: str,
        *,
        recipient_user_id: str,
        payload: Mapping[str, Any],
        idempotency_key: str | None = None,
        deliver_at: str | None = None,
        delay_seconds: int | None = None,
    ) -> SendResult:
        """Send a notification: `{id, status}`. A repeated `idempotency_key` answers the first
        send's id; 422 (TenantdError) names the payload's invalid fields in `details`."""
        body: dict[str, Any] = {
            "type": type,
            "recipientUserId": recipient_user_id,
            "payload": dict(payload),
        }
        if idempotency_key is not None:
            body["idempotencyKey"] = idempotency_key
        if deliver_at is not None:
            body["deliverAt"] = deliver_at
        if delay_seconds is not None:
            body["delaySeconds"] = delay_seconds
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        result: SendResult = self._call("POST", "/api/v1/notifications/send", body, headers)
        return result

    def send_batch(self, items: list[Mapping[str, Any]]) -> dict[str, Any]:
        """Several sends in one request (`items` in the API's camelCase shape)."""
        result: dict[str, Any] = self._call(
            "POST", "/api/v1/notifications/send-batch", {"items": [dict(i) for i in items]}
        )
        return result

    def events(
        self,
        after: str | None = None,
        *,
        types: list[str] | None = None,
        limit: int | None = None,
    ) -> EventPage:
        """One page of events after the cursor `after`: `{items, nextCursor, hasMore}`."""
        query: dict[str, str] = {}
        if after:
            query["after"] = after
        if types:
            query["types"] = ",".join(types)
        if limit:
            query["limit"] = str(limit)
        suffix = f"?{urllib.parse.urlencode(query)}" if query else ""
        page: EventPage = self._call("GET", f"/api/v1/events{suffix}")
        return page

    def event_pages(
        self,
        after: str | None = None,
        *,
        types: list[str] | None = None,
        limit: int | None = None,
    ) -> Iterator[EventPage]:
        """The pages after `after` up to the newest. Store `page["nextCursor"]` once a page is
        handled, so a crash repeats a page rather than skipping one."""
        cursor = after
        while True:
            page = self.events(cursor, types=types, limit=limit)
            yield page
            cursor = page["nextCursor"]
            if not page["hasMore"]:
                return


def _error(exc: urllib.error.HTTPError) -> TenantdError:
    try:
        body = json.loads(exc.read() or b"null")
    except ValueError:
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    retry = exc.headers.get("Retry-After") if exc.headers else None
    return TenantdError(
        exc.code,
        str(error.get("code") or f"HTTP_{exc.code}"),
        str(error.get("message") or exc.reason),
        error.get("details"),
        int(retry) if retry and retry.isdigit() else None,
    )
