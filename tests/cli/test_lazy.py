"""`tenantd --help` loads no server module; each command is loaded when it runs, with the
options it always had; the root's table of commands says what each command says of itself."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer import _click as click
from typer.main import get_command, get_group
from typer.testing import CliRunner

from tenantd.cli.lazy import COMMANDS, LazyCommand
from tenantd.cli.main import app

# The bound issue 27 sets: `tenantd --help` imports at most this many modules beyond the ones
# `import typer` loads (it was 1,095 when every command module was imported up front).
MAX_MODULES_BEYOND_TYPER = 150

COUNT = """
import json, sys
before = set(sys.modules)
import typer
with_typer = set(sys.modules)
sys.argv = ["tenantd", *sys.argv[1:]]
from tenantd.cli.main import main
try:
    main()
except SystemExit as done:
    code = done.code
beyond = sorted(set(sys.modules) - with_typer)
sys.stderr.write(json.dumps({"code": code, "beyond": beyond}) + "\\n")
"""


def modules_beyond_typer(*args: str) -> tuple[int, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", COUNT, *args], capture_output=True, text=True, timeout=60
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["beyond"]


def test_root_help_imports_at_most_150_modules_beyond_typer() -> None:
    code, beyond = modules_beyond_typer("--help")
    assert code == 0
    assert len(beyond) <= MAX_MODULES_BEYOND_TYPER, beyond
    # None of the server: no web framework, no database driver, no domain.
    for heavy in ("aiohttp", "sqlalchemy", "psycopg2", "tenantd.app", "tenantd.bundle"):
        assert heavy not in beyond, heavy


def test_a_command_loads_its_module_only_when_it_runs() -> None:
    _, beyond = modules_beyond_typer("vapid", "--help")
    assert "tenantd.cli.vapid" in beyond
    assert "tenantd.cli.accounts" not in beyond and "tenantd.cli.serve" not in beyond


def test_a_command_opens_the_services_without_loading_a_view() -> None:
    # Every CLI command opens the Domains record; the route table (and pysaml2 and the SCIM
    # models behind the SSO and directory views) is the web app's alone: each command run
    # paid about two seconds for it before.
    _, beyond = modules_beyond_typer("api-keys", "list", "--help")
    assert "tenantd.app.bundle" in beyond
    views = [name for name in beyond if name.rpartition(".")[2].endswith("views")]
    assert views == []
    for heavy in ("tenantd.app.routes", "tenantd.app.factory", "saml2", "scim2_models"):
        assert heavy not in beyond, heavy


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda entry: entry.name)
def test_each_table_line_names_its_command_and_its_own_help(entry: LazyCommand) -> None:
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    if isinstance(target, typer.Typer):
        real: click.Command = get_group(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(entry.name)(target)
        real = get_command(single)
    assert real.get_short_help_str(limit=500) == entry.help


def test_every_command_module_is_in_the_table() -> None:
    package = Path(importlib.import_module("tenantd.cli").__file__ or "").parent
    support = {"__init__", "common", "lazy", "main", "state"}
    modules = {path.stem for path in package.glob("*.py")} - support
    assert modules == {entry.module.rpartition(".")[2] for entry in COMMANDS}


@pytest.mark.parametrize(
    ("args", "options"),
    [
        (["serve", "--help"], ["--host", "--port", "--no-migrate", "--env-file"]),
        (["sweep", "--help"], ["--dry-run", "--json"]),
        (["status", "--help"], ["--json"]),
        (["accounts", "--help"], ["list", "show", "set-plan", "set-feature", "restore"]),
        (["accounts", "set-plan", "--help"], ["--seats"]),
        (["api-keys", "create", "--help"], ["--name", "--scopes"]),
        (["audit", "export", "--help"], ["--since", "--format"]),
        (["notify", "send", "--help"], ["--user", "--payload"]),
        (["webhooks", "add", "--help"], ["--events", "--description"]),
    ],
)
def test_a_commands_help_still_shows_its_options(args: list[str], options: list[str]) -> None:
    result = CliRunner().invoke(app, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    for option in options:
        assert option in result.output, (option, result.output)
