"""The snippets of docs/event-catalog.md run as written against a live `tenantd serve`: the
YAML catalog (marked `event-catalog-yaml`) is its TENANTD_EVENT_CATALOG, and the Node backend
(marked `define-event-node`) declares `post.commented` over HTTP and sends it, as a team
whose backend is Node would; the notification is stored with the rendered texts."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tenantd.db import Database
from tests.apikeys.helpers import new_key
from tests.docs.snippets import ROOT, snippet
from tests.helpers import SECRET, eventually
from tests.ops.servers import running, server_env, start_server

PLACEHOLDER = "https://auth.example.com"


async def node(script: Path, env: dict[str, str]) -> tuple[int, str, str]:
    executable = shutil.which("node")
    if executable is None:
        pytest.fail("node is not on PATH: install Node.js to run the manual's Node snippet")
    process = await asyncio.create_subprocess_exec(
        executable,
        str(script),
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_the_node_backend_defines_an_event_and_sends_it(
    db: Database, factory: Any, migrated: str, tmp_path: Path
) -> None:
    catalog = tmp_path / "events.yaml"
    catalog.write_text(snippet("event-catalog-yaml").code)
    env = server_env(
        migrated, tmp_path, SECRET, TENANTD_EVENT_CATALOG=str(catalog), QUEUES_ENABLED="false"
    )
    env["TENANTD_SCHEDULER_ENABLED"] = "false"
    env["PYTHONPATH"] = str(ROOT)  # this checkout's tenantd, whatever the venv points at
    server = start_server("catalog", env, tmp_path)
    author = await factory.user()
    key = await new_key(db, "notifications:manage", "notifications:send")
    async with running([server]):
        headers = {"Authorization": f"Bearer {key.token}"}
        async with (
            aiohttp.ClientSession(headers=headers) as session,
            session.get(f"{server.url}/api/v1/notifications/event-types") as response,
        ):
            listed = (await response.json())["data"]
        by_type = {item["type"]: item for item in listed}
        assert "build.failed" in by_type, (listed, server.log())
        catalog_type = by_type["build.failed"]
        assert catalog_type["source"] == "catalog" and catalog_type["critical"] is True

        script = tmp_path / "backend.mjs"
        code = snippet("define-event-node").code
        assert PLACEHOLDER in code
        script.write_text(
            f'const post = {{ id: "p_42", authorId: {json.dumps(str(author.id))} }};\n'
            'const comment = { authorId: "u_7", text: "Ship it" };\n'
            + code.replace(PLACEHOLDER, server.url)
            + "\nconsole.log(JSON.stringify(data));\n"
        )
        secrets = {"TENANTD_API_KEY": key.token}
        code_, out, err = await node(script, secrets)
        assert code_ == 0, err + server.log()
        answer = json.loads(out)
        assert answer["status"] == "created", out
        # Run again (a restart of the backend): the PUT replaces, the send is deduplicated.
        code_, out, err = await node(script, secrets)
        assert code_ == 0, err
        assert json.loads(out)["status"] == "duplicate", out

    row = await db.fetch_one(
        "SELECT event_type, title, body FROM notifications WHERE id = %(i)s", {"i": answer["id"]}
    )
    assert dict(row) == {
        "event_type": "post.commented",
        "title": "New comment on p_42",
        "body": "Ship it",
    }
    stored = await db.fetch_val("SELECT version FROM event_definitions")
    assert stored is not None
    mails = await eventually(lambda: list((tmp_path / "mail").glob("*.eml")))
    assert len(mails) == 1
    assert "Ship it" in mails[0].read_text()
