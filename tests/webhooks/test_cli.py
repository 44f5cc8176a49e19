"""`tenantd webhooks ...` and the webhook lines of `tenantd status`, as an operator runs them."""

from __future__ import annotations

import json
import re
from typing import Any

from tests.factories import run_tenantd
from tests.webhooks.receiver import start_receiver


async def test_the_operator_commands(env: dict[str, str], db: Any, aiohttp_server: Any) -> None:
    receiver = await start_receiver(aiohttp_server, [])
    code, out, err = await run_tenantd(
        env, "webhooks", "add", receiver.url + "/hook", "--events", "user.*", "--description", "app"
    )
    assert code == 0, err
    endpoint_id = re.search(r"^id\s+(\S+)$", out, re.M).group(1)  # type: ignore[union-attr]
    secret = re.search(r"^secret\s+(whsec_\S+)$", out, re.M).group(1)  # type: ignore[union-attr]

    code, out, _ = await run_tenantd(env, "webhooks", "list", "--json")
    listed = json.loads(out)
    assert listed[0]["id"] == endpoint_id and listed[0]["events"] == ["user.*"]
    assert "secret" not in out and secret not in out

    code, out, _ = await run_tenantd(env, "webhooks", "rotate-secret", endpoint_id)
    assert code == 0 and re.search(r"secret whsec_", out)

    code, out, _ = await run_tenantd(env, "webhooks", "test", endpoint_id)
    assert code == 0 and "evt_" in out
    code, out, _ = await run_tenantd(env, "webhooks", "deliveries", endpoint_id, "--json")
    rows = json.loads(out)
    assert rows[0]["type"] == "webhook.test" and rows[0]["status"] == "pending"

    code, out, _ = await run_tenantd(
        env, "webhooks", "replay", endpoint_id, "--since", "2020-01-01T00:00:00Z"
    )
    assert code == 0 and "queued 0 deliveries" in out

    code, out, _ = await run_tenantd(env, "status")
    assert "webhook " + receiver.url in out and "backlog 1" in out

    code, _, err = await run_tenantd(env, "webhooks", "add", "http://169.254.169.254/")
    assert code == 1 and "metadata" in err
    code, _, err = await run_tenantd(env, "webhooks", "remove", "not-a-uuid")
    assert code == 2
    code, _, _ = await run_tenantd(env, "webhooks", "remove", endpoint_id)
    assert code == 0
    code, _, err = await run_tenantd(env, "webhooks", "remove", endpoint_id)
    assert code == 1 and "no webhook endpoint" in err
