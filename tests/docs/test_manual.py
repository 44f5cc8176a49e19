"""The manual builds with `mkdocs build --strict` (a broken link or anchor fails), its generated
pages are up to date, every variable the code reads is documented, and the README stays a
front page whose links resolve."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tenantd.app import manual
from tests.docs.snippets import ROOT

MKDOCS = Path(sys.executable).with_name("mkdocs")
README = ROOT / "README.md"


def build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--config-file", str(config), "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )


def test_the_manual_builds_in_strict_mode(tmp_path: Path) -> None:
    done = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "index.html").exists()
    tour = (tmp_path / "site" / "getting-started" / "index.html").read_text()
    assert "auth/verify-email" in tour  # the README's tour, included at build time


def test_a_broken_link_fails_the_build(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# x\n\n[gone](nowhere.md) and [anchor](index.md#nothing)\n")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        (ROOT / "mkdocs.yml")
        .read_text()
        .replace("docs_dir: docs", f"docs_dir: {docs}")
        .split("\nnav:")[0]
    )
    done = build(config, tmp_path / "site")
    assert done.returncode != 0
    assert "nowhere.md" in done.stderr and "#nothing" in done.stderr


def test_the_generated_pages_are_up_to_date() -> None:
    for path, text in manual.pages().items():
        assert path.read_text() == text, f"{path.name} is out of date: run scripts/docs"


def test_every_variable_the_code_reads_is_documented_and_none_is_invented() -> None:
    missing, unread = manual.undocumented()
    assert missing == set(), f"add to config/tenantd.env.example: {sorted(missing)}"
    assert unread == set(), f"documented but never read: {sorted(unread)}"


def test_a_new_variable_in_the_code_is_found(tmp_path: Path) -> None:
    (tmp_path / "knobs.py").write_text(
        "from tenantd.settings import env_int\n"
        "SETTING = 'TENANTD_SOME_FLAG'\n"
        "def knob(env):\n"
        "    return env_int(env, 'TENANTD_NEW_KNOB', 3) + int(env.get('OTHER_VAR', '0'))\n"
    )
    found = manual.read_variables(tmp_path)
    assert {"TENANTD_SOME_FLAG", "TENANTD_NEW_KNOB", "OTHER_VAR"} <= found


def test_the_configuration_page_shows_each_documented_variable() -> None:
    text = """# --- Things ---
# How often to poll.
POLL_SECONDS=5
# A secret, unset by default.
# SOME_TOKEN=abc
"""
    page = manual.configuration_page(text)
    assert "## Things" in page
    assert "| `POLL_SECONDS` | `5` | How often to poll. |" in page
    assert "| `SOME_TOKEN` | *unset* | A secret, unset by default. Example: `abc`. |" in page


def test_the_api_page_lists_every_operation_of_the_document() -> None:
    document = manual.openapi_document()
    page = manual.api_page(document)
    for path, methods in document["paths"].items():
        for method in methods:
            assert f"`{method.upper()} {path}" in page, (method, path)


def test_the_readme_is_a_front_page() -> None:
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "scripts/run" in text and "scripts/test" in text
    assert "../shared" not in text
    for heading in ("## Two commands", "## A five-minute tour", "## Security", "## The manual"):
        assert heading in text


@pytest.mark.parametrize("page", [README, ROOT / "bench" / "README.md"], ids=lambda p: p.name)
def test_readme_links_resolve(page: Path) -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text())
    local = [link for link in links if "://" not in link]
    assert local
    for link in local:
        assert (page.parent / link).exists(), link
