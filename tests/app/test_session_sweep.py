"""The session sweep removes exactly the rows that can no longer matter."""

from __future__ import annotations

from tenantd.app.bundle import Domains
from tenantd.app.plugins import registered_sweeps
from tenantd.db import Database
from tenantd.ops.sweeps import run_sweep
from tests.factories import Factory


async def test_session_sweep_deletes_only_expired_rows(
    standalone_services: Domains, db: Database, factory: Factory
) -> None:
    user = await factory.user()
    live = await factory.tokens(user)
    await factory.tokens(user)  # a second live session
    await db.execute(
        "INSERT INTO sessions (family_id, user_id, token_hash, expires_at)"
        " SELECT gen_random_uuid(), %(u)s, decode(md5(g::text), 'hex'), now() - interval '1 s'"
        " FROM generate_series(1, 25) g",
        {"u": user.id},
    )
    await db.execute(
        "INSERT INTO revoked_tokens (jti, user_id, expires_at) VALUES"
        " (gen_random_uuid(), %(u)s, now() - interval '1 minute'),"
        " (gen_random_uuid(), %(u)s, now() + interval '10 minutes')",
        {"u": user.id},
    )
    await db.execute(
        "INSERT INTO user_tokens (token_hash, user_id, purpose, expires_at) VALUES"
        " ('\\x01', %(u)s, 'verify_email', now() - interval '2 days'),"
        " ('\\x02', %(u)s, 'password_reset', now() - interval '2 hours'),"  # grace day
        " ('\\x03', %(u)s, 'password_reset', now() + interval '1 hour')",
        {"u": user.id},
    )
    await db.execute(
        "INSERT INTO rate_limits (key, window_start, count) VALUES"
        " ('login:ip:old', now() - interval '2 days', 3),"
        " ('login:ip:new', now() - interval '1 minute', 3)"
    )
    await db.execute(
        "INSERT INTO webhook_events (provider, event_id, received_at) VALUES"
        " ('resend', 'old', now() - interval '31 days'),"
        " ('resend', 'new', now() - interval '29 days')"
    )

    outcome = await run_sweep(standalone_services, registered_sweeps()["sessions"], batch_size=10)

    assert outcome.status == "ok"
    assert outcome.counts == {
        "sessions": 25,
        "revoked_tokens": 1,
        "user_tokens": 1,
        "rate_limits": 1,
        "webhook_events": 1,
    }
    assert await db.fetch_val("SELECT count(*) FROM sessions") == 2
    assert (
        await db.fetch_val(
            "SELECT count(*) FROM sessions WHERE access_jti = %(j)s", {"j": live.access.jti}
        )
        == 1
    )
    assert await db.fetch_val("SELECT count(*) FROM revoked_tokens") == 1
    assert await db.fetch_val("SELECT count(*) FROM user_tokens") == 2
    assert await db.fetch_val("SELECT key FROM rate_limits") == "login:ip:new"
    assert await db.fetch_val("SELECT event_id FROM webhook_events") == "new"
