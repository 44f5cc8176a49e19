"""The kernel's cache mechanism (cache/keyed.py): how announcements are read, which of them a
cache hears, and the generic cache with invalidation by key."""

from __future__ import annotations

import uuid

from tenantd.cache.keyed import KeyedCache, announcement


class UserCache(KeyedCache[bytes]):
    HEARS = frozenset({"user"})
    FLUSHED_BY = frozenset({"account"})


def enabled(budget: int = 100) -> UserCache:
    cache = UserCache(budget=budget, changes_kept=10)
    cache.enabled = True
    return cache


def test_announcements_are_read_from_payloads_and_notices() -> None:
    a, b = uuid.uuid4(), uuid.uuid4()
    assert announcement(f"user:{a}") == ("user", (a,))
    assert announcement(f"tenantd_cache:inboxes:{a},{b}") == ("inboxes", (a, b))
    # A trigger's NOTICE carries the function's CONTEXT after the announcement.
    notice = f"tenantd_cache:jti:{a}\nCONTEXT:  PL/pgSQL function tenantd_cache_announce"
    assert announcement(notice) == ("jti", (a,))
    assert announcement("all") == ("all", None)
    assert announcement("user:not-a-uuid") == ("user", None)
    assert announcement("inboxes:") == ("inboxes", None)
    assert announcement("test-marker:1") is None


def test_a_cache_drops_the_keys_it_hears_and_ignores_other_kinds() -> None:
    cache = enabled()
    a, b = uuid.uuid4(), uuid.uuid4()
    for key in (a, b):
        cache.store(key, "x", b"1", cache.version())
    cache.apply(f"user:{a}")
    assert cache.get(a, "x") is None and cache.get(b, "x") == b"1"
    cache.apply(f"jti:{b}")
    cache.apply(f"apikey:{b}")
    cache.apply("jti:garbage")  # a kind it does not hear, even unreadable
    assert cache.get(b, "x") == b"1"
    cache.apply("user:garbage")  # a kind it hears, unreadable: which key is unknown
    assert cache.get(b, "x") is None
    cache.store(b, "x", b"1", cache.version())
    cache.apply(f"account:{a}")
    assert cache.get(b, "x") is None
    cache.store(b, "x", b"1", cache.version())
    cache.apply_notices(["NOTICE:  tenantd_cache:all\n"])
    assert cache.get(b, "x") is None


def test_the_budget_evicts_the_least_recently_stored_key() -> None:
    cache = enabled(budget=3)
    a, b, c, d = (uuid.uuid4() for _ in range(4))
    cache.store(a, 1, b"a", cache.version())
    cache.store(b, 1, b"b", cache.version())
    cache.store(c, 1, b"c", cache.version())
    cache.store(a, 2, b"a2", cache.version())  # a is the most recent now
    assert cache.get(a, 1) == b"a" and cache.get(b, 1) is None and len(cache) == 3
    cache.store(d, 1, b"d", cache.version())
    assert cache.get(c, 1) is None and len(cache) == 3
    cache.store(d, 1, b"d2", cache.version())  # a replaced value is not charged twice
    assert len(cache) == 3 and cache._used == 3


def test_a_load_stores_only_if_its_key_was_not_invalidated_since_it_began() -> None:
    cache = enabled()
    a, b = uuid.uuid4(), uuid.uuid4()
    version = cache.version()
    cache.invalidate(a)
    cache.store(a, 1, b"stale", version)
    cache.store(b, 1, b"fresh", version)
    assert cache.get(a, 1) is None and cache.get(b, 1) == b"fresh"
    version = cache.version()
    cache.flush()
    cache.store(a, 1, b"stale", version)
    assert cache.get(a, 1) is None
    cache.enabled = False
    cache.store(a, 1, b"x", cache.version())
    cache.enabled = True
    assert cache.get(a, 1) is None
