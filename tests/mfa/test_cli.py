"""`tenantd users mfa-reset EMAIL`: factors and codes gone, audited, the user mailed."""

from __future__ import annotations

from typing import Any

from tenantd.db import Database
from tenantd.settings import Settings
from tests.factories import Factory, read_mails, run_tenantd
from tests.helpers import data
from tests.mfa.helpers import user_with_totp


async def test_mfa_reset(
    make_client: Any,
    factory: Factory,
    db: Database,
    settings: Settings,
    env: dict[str, str],
    mail_dir: Any,
) -> None:
    user, _ = await user_with_totp(factory, make_client, db, settings)
    code, out, err = await run_tenantd(env, "users", "mfa-reset", user.email)
    assert code == 0, err
    assert str(user.id) in out
    assert not await db.fetch_val("SELECT mfa_enabled FROM users WHERE id = %(u)s", {"u": user.id})
    for table in ("mfa_totp", "mfa_recovery_codes", "passkeys"):
        count = await db.fetch_val(
            f"SELECT count(*) FROM {table} WHERE user_id = %(u)s", {"u": user.id}
        )
        assert count == 0, table
    audit = await db.fetch_one(
        "SELECT * FROM audit_log WHERE action = 'user.mfa_reset' AND target = %(t)s",
        {"t": str(user.id)},
    )
    assert audit is not None
    assert [m for m in read_mails(mail_dir) if user.email in m["To"] and "reset" in m["Subject"]]
    # The user signs in with the password alone again.
    browser = await make_client()
    answer = await data(
        await browser.post(
            "/api/v1/auth/login", json={"email": user.email, "password": user.password}
        )
    )
    assert answer["user"]["id"] == str(user.id)

    missing, _, err = await run_tenantd(env, "users", "mfa-reset", "nobody@example.com")
    assert missing == 1 and "No user" in err
