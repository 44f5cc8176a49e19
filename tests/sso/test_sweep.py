"""The hourly `sso` sweep forgets unanswered SAML requests and remembered assertions past
their time, and nothing live."""

from __future__ import annotations

from typing import Any

from tenantd.app.plugins import registered_sweeps
from tenantd.ops.sweeps import run_sweep
from tests.accounts.helpers import Team
from tests.sso.helpers import add_saml
from tests.sso.saml_idp import SamlIdp


async def test_the_sweep_deletes_only_what_expired(
    team: Team, saml_idp: SamlIdp, services: Any, db: Any
) -> None:
    connection = await add_saml(team.owner_client, team.account_id, saml_idp)
    params = {"c": connection["id"]}
    await db.execute(
        "INSERT INTO sso_saml_requests (id, connection_id, binding_hash, expires_at) VALUES"
        " ('old', %(c)s, '\\x00', now() - interval '1 minute'),"
        " ('live', %(c)s, '\\x00', now() + interval '9 minutes')",
        params,
    )
    await db.execute(
        "INSERT INTO sso_saml_assertions (connection_id, assertion_id, expires_at) VALUES"
        " (%(c)s, 'old', now() - interval '1 minute'), (%(c)s, 'live', now() + interval '1 hour')",
        params,
    )
    outcome = await run_sweep(services, registered_sweeps()["sso"])
    assert outcome.counts == {"sso_saml_requests": 1, "sso_saml_assertions": 1}
    assert await db.fetch_val("SELECT array_agg(id) FROM sso_saml_requests") == ["live"]
    assert await db.fetch_val("SELECT array_agg(assertion_id) FROM sso_saml_assertions") == ["live"]
