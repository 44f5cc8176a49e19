"""`tenantd directories create ACCOUNT_ID` prints the id and the token; the token opens the
directory's SCIM endpoints; `list` shows no token."""

from __future__ import annotations

import json
import uuid
from typing import Any

from tests.directories.conftest import scim_json
from tests.factories import Factory, run_tenantd


async def test_create_prints_id_and_token_and_the_token_works(
    env: dict[str, str], factory: Factory, make_client: Any, db: Any
) -> None:
    owner = await factory.user(plan="team", password=None)
    assert owner.account_id is not None
    code, out, err = await run_tenantd(
        env, "directories", "create", str(owner.account_id), "--name", "Okta"
    )
    assert code == 0, err
    directory_id, token = out.split()
    assert token.startswith("scim_") and "shown only this once" in err
    stored = await db.fetch_one(
        "SELECT account_id, name, token_hash FROM directories WHERE id = %(i)s",
        {"i": uuid.UUID(directory_id)},
    )
    assert stored["account_id"] == owner.account_id and stored["name"] == "Okta"
    assert token.encode() not in bytes(stored["token_hash"])

    client = await make_client(origin=None)
    response = await client.get(
        f"/scim/v2/{directory_id}/ServiceProviderConfig",
        headers={"Authorization": f"Bearer {token}"},
    )
    config = await scim_json(response)
    assert config["patch"]["supported"] is True

    code, out, err = await run_tenantd(env, "directories", "list", str(owner.account_id), "--json")
    assert code == 0, err
    listed = json.loads(out)
    assert [item["id"] for item in listed] == [directory_id]
    assert token not in out

    code, _, err = await run_tenantd(env, "directories", "create", str(uuid.uuid4()))
    assert code == 1 and err.startswith("error: no live account")
