"""One configuration for server and CLI (issue 28 part 7): real `tenantd serve` processes
report themselves in `instances`; `tenantd status` (the real console script) shows them, marks
a killed one stale, forgets a cleanly stopped one, reads the service's env file by default
and names where its own configuration differs; `tenantd notify send` follows the instances."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import psycopg2
import pytest

from tenantd.app.settings import load_settings
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.identity.settings import SignInSettings
from tenantd.jobs.settings import JobSettings
from tenantd.ops.instances import SEND_SWITCHES, InstanceConflict, follow_instances, switches
from tests.factories import Factory
from tests.helpers import SECRET, eventually
from tests.ops.servers import (
    REPO,
    TENANTD,
    fresh_database,
    running,
    server_env,
    start_server,
)

EVENT_MODULE = "tests.notifications.events_fixture"
PUSH_MODULE = "tests.notifications.push_events_fixture"
BEAT = "0.2"  # seconds between heartbeats: stale after three missed

pytestmark = pytest.mark.slow


def run_sql(url: str, statement: str) -> None:
    with psycopg2.connect(url_to_dsn(url)) as conn, conn.cursor() as cur:
        cur.execute(statement)


def write_catalog(path: Path) -> Path:
    """A TENANTD_EVENT_CATALOG file with one declarative event type."""
    entry = {
        "type": "build.failed",
        "payloadSchema": {"type": "object", "properties": {"repo": {"type": "string"}}},
        "defaultChannels": ["in_app"],
        "label": "Build failed",
        "inApp": {"title": "Build of {{ payload.repo }} failed"},
    }
    path.write_text(json.dumps([entry]))
    return path


def write_env_file(path: Path, values: dict[str, str]) -> Path:
    path.write_text(
        "# the service's configuration\n" + "".join(f"{k}={v}\n" for k, v in values.items())
    )
    return path


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The console script of this checkout, with only `env` (no inherited configuration)."""
    return subprocess.run(
        [TENANTD, *args],
        env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def status_json(env: dict[str, str], *args: str) -> dict[str, Any]:
    result = cli(env, *args, "status", "--json")
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def mine(report: dict[str, Any], pid: int) -> dict[str, Any] | None:
    return next((i for i in report["instances"] if i["pid"] == pid), None)


async def poll_status(env: dict[str, str], check: Any, *args: str) -> dict[str, Any]:
    """`tenantd status --json` until `check(report)` holds (each run is a fresh process)."""

    async def once() -> dict[str, Any] | None:
        report = await asyncio.to_thread(status_json, env, *args)
        return report if check(report) else None

    result: dict[str, Any] = await eventually(once, within=60.0, interval=0.1)
    return result


async def test_status_shows_each_instance_stale_after_kill_gone_after_sigterm(
    migrated: str, tmp_path: Path
) -> None:
    catalog = write_catalog(tmp_path / "events.json")
    with fresh_database(migrated) as url:
        service = server_env(
            url,
            tmp_path,
            SECRET,
            QUEUES_ENABLED="true",
            NOTIFICATIONS_SSE_ENABLED="true",
            MAGIC_LINK_ENABLED="true",
            TENANTD_EVENT_MODULES=EVENT_MODULE,
            TENANTD_EVENT_CATALOG=str(catalog),
            TENANTD_SCHEDULER_ENABLED="false",
            TENANTD_INSTANCE_HEARTBEAT_SECONDS=BEAT,
        )
        # The service's env file, as systemd's EnvironmentFile= gives it to the server; the
        # CLI finds it by its default path (TENANTD_ENV_FILE stands in for
        # /etc/tenantd/tenantd.env here) with nothing of it in its own environment.
        env_file = write_env_file(tmp_path / "tenantd.env", service)
        operator = {"TENANTD_ENV_FILE": str(env_file), "TENANTD_DATA_DIR": str(tmp_path / "cli")}
        a = start_server("a", {**service, "TENANTD_ENV_FILE": ""}, tmp_path)
        async with running([a]):
            # A fresh heartbeat: refreshed since the start, not stale.
            report = await poll_status(
                operator,
                lambda r: (
                    (i := mine(r, a.process.pid)) is not None
                    and not i["stale"]
                    and i["heartbeatAt"] > i["startedAt"]
                ),
            )
            assert report["config"]["envFile"] == str(env_file)
            instance = mine(report, a.process.pid)
            assert instance is not None
            assert instance["version"] == report["version"]
            assert instance["listen"] == f"127.0.0.1:{a.port}"
            switches = instance["switches"]
            assert switches["QUEUES_ENABLED"] is True
            assert switches["NOTIFICATIONS_SSE_ENABLED"] is True
            assert switches["MAGIC_LINK_ENABLED"] is True
            assert switches["EMAIL_PROVIDER"] == "file"
            assert switches["TENANTD_EVENT_CATALOG"] == str(catalog)
            assert switches["DECLARED_EVENT_TYPES"] == 1  # the catalog's one entry
            assert "comment.created" in instance["eventTypes"]
            assert "build.failed" in instance["eventTypes"]
            # The CLI read the same file: no difference, and its own view agrees.
            assert instance["differences"] == []
            assert report["queuesEnabled"] is True
            # Nothing secret in a row: not the database URL, not the secret key.
            row = json.dumps(instance)
            assert SECRET not in row and url not in row and "postgresql" not in row

            # The row is written again at the next heartbeat when it went missing.
            await asyncio.to_thread(run_sql, url, "DELETE FROM instances")
            await poll_status(operator, lambda r: mine(r, a.process.pid) is not None)

            human = cli(operator, "status")
            assert human.returncode == 0, human.stderr
            assert f"pid {a.process.pid} on 127.0.0.1:{a.port}: live" in human.stdout
            assert "QUEUES_ENABLED=on" in human.stdout
            assert f"TENANTD_EVENT_CATALOG={catalog} " in human.stdout
            assert "DECLARED_EVENT_TYPES=1" in human.stdout
            assert "comment.created" in human.stdout
            assert "differs from this CLI: nothing" in human.stdout
            assert str(env_file) in human.stdout

            # The environment wins over the file, as for the service: now they differ.
            report = status_json({**operator, "MAGIC_LINK_ENABLED": "false"})
            instance = mine(report, a.process.pid)
            assert instance is not None
            assert instance["differences"] == [
                {"name": "MAGIC_LINK_ENABLED", "cli": False, "instance": True}
            ]
            human = cli({**operator, "MAGIC_LINK_ENABLED": "false"}, "status")
            assert "MAGIC_LINK_ENABLED (instance on, CLI off)" in human.stdout
            # --env-file overrides the default file.
            other = write_env_file(tmp_path / "other.env", {**service, "QUEUES_ENABLED": "false"})
            report = status_json(operator, "--env-file", str(other))
            assert report["config"]["envFile"] == str(other)
            instance = mine(report, a.process.pid)
            assert instance is not None
            assert [d["name"] for d in instance["differences"]] == ["QUEUES_ENABLED"]

            # kill -9: no goodbye; the row goes stale once three heartbeats are missed.
            a.terminate(signal.SIGKILL)
            await asyncio.to_thread(a.wait, 30)
            report = await poll_status(
                operator, lambda r: (i := mine(r, a.process.pid)) is not None and i["stale"]
            )
            human = cli(operator, "status")
            assert f"pid {a.process.pid} on 127.0.0.1:{a.port}: STALE" in human.stdout

        # SIGTERM: a clean shutdown deletes its row (the killed one stays, stale).
        b = start_server("b", {**service, "TENANTD_ENV_FILE": ""}, tmp_path)
        async with running([b]):
            await poll_status(operator, lambda r: mine(r, b.process.pid) is not None)
            b.terminate(signal.SIGTERM)
            assert await asyncio.to_thread(b.wait, 60) == 0, b.log()
        report = status_json(operator)
        assert mine(report, b.process.pid) is None
        assert [i["pid"] for i in report["instances"]] == [a.process.pid]


async def test_notify_send_follows_the_running_instances(migrated: str, tmp_path: Path) -> None:
    with fresh_database(migrated) as url:
        service = server_env(
            url,
            tmp_path,
            SECRET,
            QUEUES_ENABLED="true",
            TENANTD_EVENT_MODULES=EVENT_MODULE,
            TENANTD_SCHEDULER_ENABLED="false",
            TENANTD_JOB_POLL_SECONDS="0.05",
            TENANTD_INSTANCE_HEARTBEAT_SECONDS=BEAT,
            TENANTD_ENV_FILE="",
        )
        db = await create_database(url_to_dsn(url), minsize=1, maxsize=2)
        try:
            server = start_server("queues-on", service, tmp_path)
            async with running([server]):
                await poll_status(service, lambda r: mine(r, server.process.pid) is not None)
                factory = Factory(db, load_settings(environ=service))
                user = await factory.user()
                payload = json.dumps({"actorId": "someone", "commentId": "c1", "text": "hi"})
                # This CLI's own environment says queues are off; the service's say on: the
                # CLI writes the job, the instance's runner delivers it.
                result = cli(
                    {**service, "QUEUES_ENABLED": "false"},
                    "notify",
                    "send",
                    "comment.created",
                    "--user",
                    str(user.id),
                    "--payload",
                    payload,
                )
                assert result.returncode == 0, result.stderr
                outcome = json.loads(result.stdout)
                assert outcome["status"] == "queued"
                await eventually(
                    lambda: db.fetch_val(
                        "SELECT count(*) FROM notifications WHERE id = %(id)s",
                        {"id": outcome["notificationId"]},
                    ),
                    within=60.0,
                )
                jobs = await db.fetch_val("SELECT count(*) FROM jobs")
                # An event type this CLI registers and the instance does not: refused, as
                # the instance's runner could not dispatch it; nothing written.
                result = cli(
                    {**service, "TENANTD_EVENT_MODULES": f"{EVENT_MODULE},{PUSH_MODULE}"},
                    "notify",
                    "send",
                    "bulletin.posted",
                    "--user",
                    str(user.id),
                    "--payload",
                    json.dumps({"title": "t", "text": "x"}),
                )
                assert result.returncode == 1
                assert "not registered on the running instance" in result.stderr
                assert await db.fetch_val("SELECT count(*) FROM jobs") == jobs

            # Queues off on the instance: the CLI delivers itself, so it refuses to do so
            # with a configuration that differs from the instance's on a send switch.
            off = {**service, "QUEUES_ENABLED": "false"}
            server = start_server("queues-off", off, tmp_path)
            async with running([server]):
                await poll_status(
                    off,
                    lambda r: (i := mine(r, server.process.pid)) is not None and not i["stale"],
                )
                args = ("notify", "send", "comment.created", "--user", str(user.id))
                payload2 = json.dumps({"actorId": "someone", "commentId": "c2", "text": "hi"})
                refused = cli(
                    {**off, "QUEUES_ENABLED": "true", "PUBLIC_BASE_URL": "https://elsewhere.test"},
                    *args,
                    "--payload",
                    payload2,
                )
                assert refused.returncode == 1
                assert "PUBLIC_BASE_URL" in refused.stderr
                assert "QUEUES_ENABLED off" in refused.stderr
                # Same configuration as the instance (queues on in the CLI's own env only):
                # delivered in the CLI process, as the instance would.
                sent = cli({**off, "QUEUES_ENABLED": "true"}, *args, "--payload", payload2)
                assert sent.returncode == 0, sent.stderr
                assert json.loads(sent.stdout)["status"] == "created"
        finally:
            await db.close()


def test_cli_default_env_file_is_the_services(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tenantd.cli import common

    unit = (REPO / "systemd" / "tenantd.service").read_text()
    assert f"EnvironmentFile={common.DEFAULT_ENV_FILE}\n" in unit
    monkeypatch.delenv("TENANTD_ENV_FILE", raising=False)
    monkeypatch.setattr(common, "DEFAULT_ENV_FILE", str(tmp_path / "missing.env"))
    assert common.default_env_file() is None
    present = write_env_file(tmp_path / "tenantd.env", {"MAGIC_LINK_ENABLED": "true"})
    monkeypatch.setattr(common, "DEFAULT_ENV_FILE", str(present))
    assert common.default_env_file() == str(present)
    monkeypatch.setenv("TENANTD_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("MAGIC_LINK_ENABLED", raising=False)
    assert common.settings().section(SignInSettings).magic_link_enabled is True
    monkeypatch.setenv("MAGIC_LINK_ENABLED", "false")  # the environment wins over the file
    assert common.settings().section(SignInSettings).magic_link_enabled is False
    monkeypatch.setenv("TENANTD_ENV_FILE", "")  # none at all
    assert common.default_env_file() is None


def test_notify_send_refuses_instances_that_disagree(tmp_path: Path) -> None:
    config = load_settings(environ={"TENANTD_DATA_DIR": str(tmp_path), "SECRET_KEY": SECRET})

    def instance(pid: int, queues: bool, *, stale: bool = False) -> dict[str, Any]:
        return {
            "host": "h",
            "pid": pid,
            "stale": stale,
            "switches": {"QUEUES_ENABLED": queues},
            "eventTypes": ["comment.created"],
        }

    with pytest.raises(InstanceConflict, match=r"disagree on QUEUES_ENABLED \(h:1 on, h:2 off\)"):
        follow_instances(config, [instance(1, True), instance(2, False)], "comment.created")
    # A stale instance runs nothing: only the live ones count.
    followed = follow_instances(
        config, [instance(1, True), instance(2, False, stale=True)], "comment.created"
    )
    assert (
        followed.section(JobSettings).queues_enabled is True
        and config.section(JobSettings).queues_enabled is False
    )
    # None running: the CLI's own configuration.
    assert follow_instances(config, [instance(1, True, stale=True)], "x") is config


async def test_serve_without_the_instances_table_still_serves(
    migrated: str, tmp_path: Path
) -> None:
    with fresh_database(migrated) as url:
        service = server_env(url, tmp_path, SECRET, TENANTD_INSTANCE_HEARTBEAT_SECONDS=BEAT)
        assert cli({**service, "TENANTD_ENV_FILE": ""}, "migrate").returncode == 0
        await asyncio.to_thread(run_sql, url, "DROP TABLE instances")
        server = start_server("no-table", service, tmp_path, "--no-migrate")
        async with running([server]):
            report = status_json({**service, "TENANTD_ENV_FILE": ""})
            assert report["database"] == "ok" and report["instances"] is None
        assert "could not register instance" in server.log()


def test_notify_send_refuses_an_instance_with_another_event_catalog(tmp_path: Path) -> None:
    catalog = write_catalog(tmp_path / "events.json")
    base = {"TENANTD_DATA_DIR": str(tmp_path), "SECRET_KEY": SECRET}
    config = load_settings(environ={**base, "TENANTD_EVENT_CATALOG": str(catalog)})
    assert "TENANTD_EVENT_CATALOG" in SEND_SWITCHES
    assert "DECLARED_EVENT_TYPES" not in switches(config)  # a server's count only

    def instance(catalog_path: str) -> dict[str, Any]:
        environ = {**base, "TENANTD_EVENT_CATALOG": catalog_path}
        return {
            "host": "h",
            "pid": 1,
            "stale": False,
            "switches": switches(load_settings(environ=environ), 1),
            "eventTypes": ["build.failed"],
        }

    # Queues off on the instance: the CLI would deliver itself, with its own catalog.
    followed = follow_instances(config, [instance(str(catalog))], "build.failed")
    assert followed.section(JobSettings).queues_enabled is False
    other = str(tmp_path / "other.json")
    with pytest.raises(InstanceConflict, match="TENANTD_EVENT_CATALOG") as refused:
        follow_instances(config, [instance(other)], "build.failed")
    assert f"this CLI {catalog}, the instance {other}" in str(refused.value)
    without = load_settings(environ=base)
    with pytest.raises(InstanceConflict, match=r"TENANTD_EVENT_CATALOG: this CLI \(unset\)"):
        follow_instances(without, [instance(str(catalog))], "build.failed")
