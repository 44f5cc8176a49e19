"""The MFA sweep: expired tickets and challenges go, and so does the sign-in record of a
session family with no session row left; live ones stay."""

from __future__ import annotations

from typing import Any

from tenantd.app.bundle import open_services
from tenantd.app.plugins import registered_sweeps
from tenantd.db import Database
from tenantd.ops.sweeps import run_sweep
from tenantd.settings import Settings
from tests.factories import Factory
from tests.mfa.helpers import password_step, user_with_totp


async def test_mfa_sweep(
    make_client: Any, factory: Factory, db: Database, settings: Settings, migrated: str
) -> None:
    user, _ = await user_with_totp(factory, make_client, db, settings)
    for _ in range(2):
        await password_step(await make_client(), user)
    await db.execute(
        "UPDATE mfa_tickets SET expires_at = now() - interval '2 hours'"
        " WHERE id = (SELECT id FROM mfa_tickets ORDER BY created_at LIMIT 1)"
    )
    await factory.tokens(user)  # a live family
    await db.execute(
        "INSERT INTO session_auth (family_id, user_id, amr, auth_time, created_at)"
        " VALUES (gen_random_uuid(), %(u)s, ARRAY['pwd'], now(), now() - interval '2 hours')",
        {"u": user.id},
    )
    await db.execute(
        "INSERT INTO webauthn_challenges (challenge_hash, purpose, expires_at)"
        " VALUES ('\\x01', 'sign_in', now() - interval '1 second'),"
        " ('\\x02', 'sign_in', now() + interval '5 minutes')"
    )
    # The TOTP enrolment left a live undo link; one more, past its life, goes.
    await db.execute(
        "INSERT INTO security_undo (user_id, action, notify_to, token_hash, expires_at)"
        " VALUES (%(u)s, 'totp_added', 'x@example.com', '\\x03', now() - interval '2 days')",
        {"u": user.id},
    )
    async with open_services(settings, migrated) as services:
        outcome = await run_sweep(services, registered_sweeps()["mfa"])
    assert outcome.status == "ok", outcome
    assert outcome.counts == {
        "mfa_tickets": 1,
        "webauthn_challenges": 1,
        "security_undo": 1,
        "session_auth": 1,
    }
    assert await db.fetch_val("SELECT count(*) FROM security_undo") == 1
    assert await db.fetch_val("SELECT count(*) FROM mfa_tickets") == 1
    assert await db.fetch_val("SELECT count(*) FROM webauthn_challenges") == 1
    live = await db.fetch_val(
        "SELECT count(*) FROM session_auth sa WHERE EXISTS"
        " (SELECT 1 FROM sessions s WHERE s.family_id = sa.family_id)"
    )
    assert live == await db.fetch_val("SELECT count(*) FROM session_auth") >= 2
