"""Every runnable snippet of the README and the manual is run: the five-minute curl tour
against a live `tenantd serve`, the event definition through tenantd's own registry checks,
and every `tenantd ...` command line against the CLI's real commands and options. (The
token-verification snippets run in tests/auth/test_verify_snippets.py.)"""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer import _click as click
from typer.core import TyperGroup
from typer.main import get_command

from tenantd.cli.main import app
from tenantd.notifications.registry import load_registry
from tests.docs.snippets import ROOT, RUNNERS, all_snippets, snippet, snippets
from tests.ops.servers import TENANTD, Server, free_port, fresh_database, wait_ready


def test_every_marked_snippet_has_a_runner_that_names_it() -> None:
    found = all_snippets()
    assert {s.name for s in found} == set(RUNNERS), (
        "a marked snippet without a runner, or a runner without its snippet"
    )
    for name, runner in RUNNERS.items():
        assert f'"{name}"' in (ROOT / runner).read_text(), (name, runner)


def test_the_event_definition_example_registers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / f"docs_events_{uuid.uuid4().hex[:8]}"
    (package / "templates").mkdir(parents=True)
    (package / "__init__.py").write_text(snippet("event-definition").code)
    (package / "templates" / "comment.txt").write_text("{{ text }}\n{{ unsubscribe_url }}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_registry([package.name])
    event = registry.get("comment.created")
    assert event.definition.default_channels == ("in_app", "email", "sse", "web_push")
    payload = event.definition.schema(actorId="a", commentId="c_1", text="hi")
    assert event.definition.self_action_guard is not None
    assert event.definition.self_action_guard("a", payload) is True


class BuildFailed(BaseModel):
    repo: str


def test_the_throttle_example_builds_an_event_definition() -> None:
    namespace: dict[str, Any] = {"BuildFailed": BuildFailed}
    exec(compile(snippet("throttle-definition").code, "docs/notifications.md", "exec"), namespace)
    throttle = namespace["Throttle"](key=lambda recipient, p: p.repo, limit=5, window_seconds=3600)
    assert throttle.key("u", BuildFailed(repo="tenantd")) == "tenantd"
    for name in ("Digest", "cancel_scheduled", "send"):
        assert callable(namespace[name])


def invocations(line: str) -> list[list[str]]:
    """`tenantd a b --x [--y] | c --z` -> [["a", "b", "--x", "--y"], ["a", "c", "--z"]]."""
    line = line.split(" # ")[0].split("  #")[0].strip()
    try:
        words = shlex.split(line)
    except ValueError:
        words = line.split()
    assert words[0] == "tenantd", line
    words = words[1:]
    if words[:1] == ["--env-file"]:
        words = words[2:]
    parts: list[list[str]] = [[]]
    for word in words:
        if word == "|":
            parts.append([])
        else:
            parts[-1].append(word.strip("[]"))
    first = parts[0]
    return [first, *([first[0], *rest] for rest in parts[1:])]


def check(words: list[str], line: str) -> None:
    command: click.Command = get_command(app)
    ctx = click.Context(command)
    path = []
    for word in words:
        if word.startswith("-") or not isinstance(command, TyperGroup):
            break
        if word in ("...", ""):
            return
        names = word.split("|")
        for name in names[1:]:
            assert command.get_command(ctx, name) is not None, (name, line)
        sub = command.get_command(ctx, names[0])
        assert sub is not None, f"no command {' '.join([*path, names[0]])!r}: {line}"
        path.append(names[0])
        command, ctx = sub, click.Context(sub, parent=ctx)
    params = command.params
    options = {"--help", *(opt for param in params for opt in (*param.opts, *param.secondary_opts))}
    for word in words:
        if word.startswith("--"):
            option = word.split("=")[0]
            assert option in options, f"{' '.join(path)} has no {option}: {line}"


def test_every_documented_command_line_names_real_commands_and_options() -> None:
    lines = [
        line
        for block in snippets("cli")
        for line in block.code.splitlines()
        if line.startswith("tenantd ")
    ]
    assert len(lines) > 40
    for line in lines:
        for words in invocations(line):
            check(words, line)


def test_the_checker_refuses_what_does_not_exist() -> None:
    with pytest.raises(AssertionError):
        check(invocations("tenantd accounts nosuch")[0], "x")
    with pytest.raises(AssertionError):
        check(invocations("tenantd accounts list --nosuch")[0], "x")


def start(env: dict[str, str], directory: Path, port: int) -> Server:
    """`tenantd serve` on `port` (its PUBLIC_BASE_URL, hence the allowed Origin, names it)."""
    log = directory / "serve.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [TENANTD, "serve", "--host", "127.0.0.1", "--port", str(port)],
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            cwd=directory,
        )
    return Server("tour", port, process, log)


async def test_the_curl_tour_runs_as_written(migrated: str, tmp_path: Path) -> None:
    code = snippet("curl-tour").code
    first, rest = code.split("\n", 1)
    assert first.startswith("B=http://127.0.0.1:8080; MAIL=var/mail;"), first
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with fresh_database(migrated) as url:
        env = {
            "PATH": os.environ.get("PATH", ""),
            "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": url,
            "SECRET_KEY": "s" * 40,
            "TENANTD_DATA_DIR": str(tmp_path),
            "PUBLIC_BASE_URL": base,
            "COOKIE_SECURE": "false",
            "EMAIL_PROVIDER": "file",
            "EMAIL_FILE_DIR": str(tmp_path / "var" / "mail"),
            "RATE_LIMIT_ENABLED": "false",
        }
        server = start(env, tmp_path, port)
        try:
            await wait_ready(server)
            script = first.replace("http://127.0.0.1:8080", base) + "\n" + rest
            done = await asyncio.to_thread(
                subprocess.run,
                ["bash", "-c", script],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"},
            )
        finally:
            server.terminate()
            await asyncio.to_thread(server.wait, 30)
    assert done.returncode == 0, done.stderr
    answers = done.stdout.splitlines()
    assert len(answers) == 9, done.stdout  # one line per `echo`
    signup, verified, me, refreshed, csrf, logout, revoked, anonymous, login = answers
    compact = [answer.replace(" ", "") for answer in answers]
    assert '"message"' in signup, signup
    assert '"hasPasswordLogin":true' in compact[1], verified
    assert "ada@example.com" in me and '"owner"' in me, me
    assert '"success":true' in compact[3], refreshed
    assert "FORBIDDEN" in csrf, csrf
    assert compact[5] in ("{}", '{"success":true,"data":{},"timestamp"') or "{}" in compact[5], (
        logout
    )
    # curl 7.88 keeps the revoked auth_token (the page says so); newer curl drops it.
    assert "invalid_session" in revoked or '"user":null' in compact[6], revoked
    assert '"user":null' in compact[7], anonymous
    assert "ada@example.com" in login, login
