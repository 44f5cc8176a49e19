"""The manual's "Verify tenantd sessions in your own backend" snippets (docs/sessions.md,
marked `verify-python` and `verify-node`), run as written against a live server: Python
(PyJWT's PyJWKClient) and Node (jose's createRemoteJWKSet; node and npm must be on PATH)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from aiohttp.test_utils import TestServer

from tests.docs.snippets import snippet

PLACEHOLDER = "https://auth.example.com"
JOSE = "jose@6"


def base_url(server: TestServer) -> str:
    return str(server.make_url("")).rstrip("/")


@pytest.fixture
def alg() -> str | None:
    return None


@pytest.fixture
def env(env: dict[str, str], alg: str | None) -> dict[str, str]:
    if alg is not None:
        env["ACCESS_TOKEN_ALG"] = alg
    return env


def tampered(token: str) -> str:
    header, payload, signature = token.split(".")
    return f"{header}.{payload}.{signature[:-4]}AAAA"


@pytest.mark.parametrize("alg", [None, "ES256"])
async def test_the_python_snippet_verifies_tenantd_tokens(
    alg: str | None, server: TestServer, factory: Any
) -> None:
    code = snippet("verify-python").code
    assert PLACEHOLDER in code
    namespace: dict[str, Any] = {}
    exec(
        compile(code.replace(PLACEHOLDER, base_url(server)), "docs/sessions.md", "exec"), namespace
    )
    user = await factory.user()
    token = (await factory.cookies(user))["auth_token"]
    claims = await asyncio.to_thread(namespace["verify_session"], token)
    assert claims["sub"] == str(user.id) and claims["aid"] == str(user.account_id)
    assert jwt.get_unverified_header(token)["alg"] == (alg or "EdDSA")
    with pytest.raises(jwt.InvalidTokenError):
        await asyncio.to_thread(namespace["verify_session"], tampered(token))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def jose_dir() -> Path:
    """A cache directory holding node_modules/jose (installed with npm on first use)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None:
        # Node ships on every machine this suite runs on (and in CI); without it the manual's
        # Node snippet would go untested, so that is a failure, not a skip.
        pytest.fail("node is not on PATH: install Node.js to run the manual's Node snippet")
    if npm is None:
        pytest.fail("node is on PATH but npm is not: install npm to run the manual's Node snippet")
    cache = Path(
        os.environ.get("TENANTD_TEST_NODE_CACHE", Path(tempfile.gettempdir()) / "tenantd-node")
    )
    cache.mkdir(parents=True, exist_ok=True)
    with locked(cache / ".lock"):
        if not (cache / "node_modules" / "jose" / "package.json").exists():
            try:
                done = subprocess.run(
                    [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", JOSE],
                    capture_output=True,
                    text=True,
                    timeout=300,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                pytest.fail(f"npm install {JOSE} timed out: the Node snippet could not run")
            if done.returncode != 0:
                reason = (done.stderr or done.stdout).strip().splitlines()[-1:]
                pytest.fail(f"npm install {JOSE} failed ({reason}): the Node snippet could not run")
    return cache


RUNNER = """
import { verifySession } from "./%s";
const results = [];
for (const token of process.argv.slice(2)) {
  try {
    results.push({ ok: true, payload: await verifySession(token) });
  } catch (error) {
    results.push({ ok: false, code: error.code ?? String(error) });
  }
}
console.log(JSON.stringify(results));
"""


@pytest.mark.parametrize("alg", [None, "ES256"])
async def test_the_node_snippet_verifies_tenantd_tokens(
    alg: str | None, server: TestServer, factory: Any
) -> None:
    cache = await asyncio.to_thread(jose_dir)
    code = snippet("verify-node").code
    assert PLACEHOLDER in code
    name = f"verify-{uuid.uuid4().hex}"
    module, runner = cache / f"{name}.mjs", cache / f"{name}-run.mjs"
    module.write_text(code.replace(PLACEHOLDER, base_url(server)))
    runner.write_text(RUNNER % module.name)
    user = await factory.user()
    token = (await factory.cookies(user))["auth_token"]
    try:
        process = await asyncio.create_subprocess_exec(
            "node",
            str(runner),
            token,
            tampered(token),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    finally:
        module.unlink(missing_ok=True)
        runner.unlink(missing_ok=True)
    assert process.returncode == 0, err.decode()
    good, bad = json.loads(out)
    assert good["ok"] is True, good
    assert good["payload"]["sub"] == str(user.id) and good["payload"]["iss"] == "tenantd"
    assert bad == {"ok": False, "code": "ERR_JWS_SIGNATURE_VERIFICATION_FAILED"}
