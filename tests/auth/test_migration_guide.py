"""docs/migration.md's "Try it" example, run as written: its shell block through bash with
`tenantd` on the PATH (this checkout) and curl against a live server; the output must be the
page's text block, and the imported user signs in with the documented password."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestServer

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "migration.md"


def section_blocks(heading: str) -> dict[str, str]:
    text = GUIDE.read_text()
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    section = text[start : end if end != -1 else len(text)]
    return {m.group(1): m.group(2) for m in re.finditer(r"```(\w+)\n(.*?)```", section, re.S)}


async def test_the_guides_example_runs_as_written(
    server: TestServer, env: dict[str, str], tmp_path: Path, db: Any
) -> None:
    blocks = section_blocks("## Try it")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "tenantd"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tenantd "$@"\n')
    shim.chmod(0o755)
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-euo",
        "pipefail",
        "-c",
        blocks["sh"],
        cwd=tmp_path,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={
            **env,
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "PYTHONPATH": str(REPO),
            "TENANTD_URL": str(server.make_url("")).rstrip("/"),
        },
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode == 0, output.decode()
    assert output.decode() == blocks["text"]
    rows = await db.fetch_all(
        "SELECT u.email, u.first_name, u.last_name, p.password_hash,"
        " ARRAY(SELECT provider || ':' || subject FROM user_identities i"
        "  WHERE i.user_id = u.id) AS links"
        " FROM users u LEFT JOIN user_passwords p ON p.user_id = u.id ORDER BY u.email"
    )
    assert [(r["email"], r["first_name"], r["last_name"], r["links"]) for r in rows] == [
        ("kim@example.com", "Kim", "Hub", ["github:583231"]),
        ("sam@example.com", "Sam", "Supa", []),
    ]
    # The documented sign-in replaced the imported bcrypt hash.
    assert rows[1]["password_hash"].startswith("$argon2id$")
