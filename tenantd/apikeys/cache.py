"""In-process cache of API keys looked up by the guard, kept correct like the principal cache.

A key's row (name, scopes, secret hash, revoked) is cached by its id after one lookup; the
guard then checks a token with one HMAC and no query. sql/0115 announces every revocation,
change of scopes or secret, and delete as `apikey:<id>` on the caches' channel (tenantd_cache):
 * the writing process gets it as a NOTICE on its own connection after commit and drops the
   key before it answers (`apply_notices`), so the instance that revoked refuses at once;
 * every other process gets it through its LISTEN connection (the pub/sub hub) on commit.
The cache serves only while that listener is confirmed alive (`live`, the same staleness
rule as the other caches), is flushed when the listener reconnects, and a lookup that raced
an invalidation is not stored (generation check).

Tokens whose HMAC matched a cached row are remembered with that row (`verified`), so a key
in use costs one dict lookup instead of a parse, a UUID and an HMAC (issue 19). Such a token
answers only while its row is still the one cached: an invalidation drops the row, and with
it every token verified against it.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass

from tenantd.apikeys.principal import ActingKey
from tenantd.cache.keyed import Announced

MAX_KEYS = 10_000


@dataclass(frozen=True, slots=True)
class KnownKey:
    """What the guard needs of one api_keys row."""

    key: ActingKey
    secret_hash: bytes
    revoked: bool


class ApiKeyCache(Announced):
    """Keys by id (on the kernel's `cache.keyed` mechanism): `apikey:<id>` drops one, `all`
    (or an unreadable id) every one."""

    HEARS = frozenset({"apikey"})

    def __init__(self, max_entries: int = MAX_KEYS):
        super().__init__()
        self.max_entries = max_entries
        self._keys: OrderedDict[uuid.UUID, KnownKey] = OrderedDict()
        # When this process last wrote each key's last_used_at (time.monotonic()).
        self._touched: dict[uuid.UUID, float] = {}
        # Full token -> the cached row its secret was checked against.
        self._verified: dict[str, KnownKey] = {}

    def get(self, key_id: uuid.UUID) -> KnownKey | None:
        if not self.serving:
            return None
        return self._keys.get(key_id)

    def verified(self, token: str) -> KnownKey | None:
        """The cached row `token` was verified against, while that row is still cached."""
        if not self.serving:
            return None
        known = self._verified.get(token)
        if known is None or self._keys.get(known.key.id) is not known:
            return None
        return known

    def remember(self, token: str, known: KnownKey) -> None:
        """`token`'s secret matched `known` (kept only if `known` is the row cached now)."""
        if not self.serving or self._keys.get(known.key.id) is not known:
            return
        if len(self._verified) >= self.max_entries:
            self._verified.clear()
        self._verified[token] = known

    def store(self, known: KnownKey, generation: int) -> None:
        """Keep a looked-up key unless something was invalidated since the lookup began."""
        if not self.serving or generation != self.generation:
            return
        if len(self._keys) >= self.max_entries:
            self._keys.popitem(last=False)
        self._keys[known.key.id] = known

    def due(self, key_id: uuid.UUID, now: float, every_seconds: float) -> bool:
        """Whether this process should write the key's last_used_at now (then marks it)."""
        last = self._touched.get(key_id)
        if last is not None and now - last < every_seconds:
            return False
        if len(self._touched) >= self.max_entries:
            self._touched.clear()
        self._touched[key_id] = now
        return True

    def invalidate(self, key_id: uuid.UUID) -> None:
        self.generation += 1
        self._keys.pop(key_id, None)

    def drop(self, kind: str, key: uuid.UUID) -> None:
        self.invalidate(key)

    def clear(self) -> None:
        self._keys.clear()
        self._verified.clear()
