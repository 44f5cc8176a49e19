"""VAPID (RFC 8292): the signer of push requests and the public key browsers subscribe with.
Web push exists only when all three WEB_PUSH_VAPID_* variables are set."""

from __future__ import annotations

import time
from collections import OrderedDict
from urllib.parse import urlsplit

from tenantd.errors import NotFound
from tenantd.notifications.settings import NotificationSettings
from tenantd.settings import Settings

VAPID_TOKEN_SECONDS = 12 * 3600
VAPID_REUSE_SECONDS = 3600
VAPID_AUDIENCES_CACHED = 256  # signed headers kept, one per push service origin (LRU)
SIGNERS_CACHED = 4  # VAPID key pairs kept (one in production; tests build several)


def require_push(settings: Settings) -> None:
    if not settings.section(NotificationSettings).web_push_enabled:
        raise NotFound("Web push is not enabled")


class VapidSigner:
    """VAPID (RFC 8292) Authorization headers, re-signed per push service every hour."""

    def __init__(self, private_key: str, subject: str):
        # Imported here: pywebpush brings requests and urllib3 (~5 MB of resident memory),
        # which an instance without web push configured never needs.
        from py_vapid import Vapid02  # noqa: PLC0415 (memory: only with web push on)

        key = private_key.strip()
        if "-----BEGIN" in key:
            self.vapid = Vapid02.from_pem(key.encode())
        else:
            self.vapid = Vapid02.from_string(key)
        self.subject = subject
        # Keyed by audience: bounded, since subscriptions choose the hosts (within the policy).
        self._cache: OrderedDict[str, tuple[float, dict[str, str]]] = OrderedDict()

    def headers(self, endpoint: str) -> dict[str, str]:
        parts = urlsplit(endpoint)
        audience = f"{parts.scheme}://{parts.netloc}"
        now = time.time()
        cached = self._cache.get(audience)
        if cached is not None and cached[0] > now:
            self._cache.move_to_end(audience)
            return cached[1]
        signed = self.vapid.sign(
            {"sub": self.subject, "aud": audience, "exp": int(now) + VAPID_TOKEN_SECONDS}
        )
        self._cache[audience] = (now + VAPID_REUSE_SECONDS, signed)
        self._cache.move_to_end(audience)
        while len(self._cache) > VAPID_AUDIENCES_CACHED:
            self._cache.popitem(last=False)
        return signed


_SIGNERS: OrderedDict[tuple[str, str], VapidSigner] = OrderedDict()


def signer(settings: Settings) -> VapidSigner:
    push = settings.section(NotificationSettings)
    assert push.vapid_private_key and push.vapid_subject
    key = (push.vapid_private_key, push.vapid_subject)
    found = _SIGNERS.get(key)
    if found is None:
        found = VapidSigner(push.vapid_private_key, push.vapid_subject)
        _SIGNERS[key] = found
        while len(_SIGNERS) > SIGNERS_CACHED:
            _SIGNERS.popitem(last=False)
    _SIGNERS.move_to_end(key)
    return found


def public_key(settings: Settings) -> dict[str, str]:
    require_push(settings)
    key = settings.section(NotificationSettings).vapid_public_key
    assert key
    return {"publicKey": key}
