"""The npm package `tenantd-client` (clients/js): its Node test suite (`node --test
clients/js/test`) against a live `tenantd serve`, `npm pack` (offline, dry run), and the
browser module tenantd serves as /static/tenantd.js being the package's own."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.clients.conftest import Seeded
from tests.ui.live import REPO_ROOT

PACKAGE = REPO_ROOT / "clients" / "js"
STATIC = REPO_ROOT / "tenantd" / "ui" / "static"


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not on PATH: install Node.js 20 and npm to test clients/js")
    return found


def test_the_node_suite_passes_against_a_live_server(seeded: Seeded, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "TENANTD_URL": seeded.server.base,
        "TENANTD_API_KEY": seeded.api_key,
        "TENANTD_EMAIL": seeded.email,
        "TENANTD_PASSWORD": seeded.password,
    }
    result = subprocess.run(
        [tool("node"), "--test", "--test-reporter=spec", "test/"],
        cwd=PACKAGE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "# fail 0" in output or "ℹ fail 0" in output, output
    assert "ℹ pass 0" not in output, output


def test_npm_pack_ships_the_modules_and_their_types(tmp_path: Path) -> None:
    result = subprocess.run(
        [tool("npm"), "pack", "--dry-run", "--json", "--offline", "--ignore-scripts"],
        cwd=PACKAGE,
        env={**os.environ, "npm_config_cache": str(tmp_path / "npm-cache")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (packed,) = json.loads(result.stdout)
    assert packed["name"] == "tenantd-client"
    files = {entry["path"] for entry in packed["files"]}
    assert {
        "package.json",
        "README.md",
        "src/browser.js",
        "src/browser.d.ts",
        "src/server.js",
        "src/server.d.ts",
    } <= files, files
    assert not any(path.startswith("test/") for path in files), files
    manifest = json.loads((PACKAGE / "package.json").read_text())
    assert not manifest.get("dependencies"), "tenantd-client has no runtime dependency"
    for entry in manifest["exports"].values():
        if isinstance(entry, dict):
            assert (PACKAGE / entry["types"]).is_file() and (PACKAGE / entry["default"]).is_file()


@pytest.mark.parametrize(
    ("served", "source"), [("tenantd.js", "browser.js"), ("tenantd.d.ts", "browser.d.ts")]
)
def test_static_tenantd_js_is_the_packages_browser_module(served: str, source: str) -> None:
    assert (STATIC / served).read_bytes() == (PACKAGE / "src" / source).read_bytes(), (
        f"tenantd/ui/static/{served} is a copy of clients/js/src/{source}: edit the package's"
        f" file, then copy it (cp clients/js/src/{source} tenantd/ui/static/{served})"
    )
