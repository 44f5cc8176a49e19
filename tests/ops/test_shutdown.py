"""Graceful shutdown: SIGTERM with an SSE client attached, a job running and a job queued;
nothing is lost, and the bound is kept (and matches systemd's TimeoutStopSec)."""

from __future__ import annotations

import asyncio
import configparser
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tenantd.app.bundle import INLINE_DRAIN_SECONDS, open_services
from tenantd.app.settings import load_settings
from tenantd.cli.serve import SHUTDOWN_TIMEOUT
from tenantd.db import Database
from tenantd.jobs.settings import JobSettings
from tenantd.notifications import send
from tenantd.ops.config import ProcessSettings
from tenantd.ops.scheduler import STOP_WAIT_SECONDS
from tenantd.ops.shutdown import Watchdog
from tests.factories import Factory
from tests.helpers import SECRET, eventually
from tests.ops.servers import REPO, read_sse, running, server_env, start_server

EVENT_MODULE = "tests.notifications.events_fixture"


class FakePostmark:
    """Postmark's /email: hangs while `hang` is set (a provider outage), then accepts."""

    def __init__(self) -> None:
        self.hang = True
        self.calls = 0
        self.accepted: list[str] = []

    async def email(self, request: web.Request) -> web.Response:
        self.calls += 1
        body = await request.json()
        if self.hang:
            await asyncio.sleep(60)
        self.accepted.append(body["To"])
        return web.json_response({"ErrorCode": 0, "MessageID": f"m-{self.calls}"})


@pytest.mark.slow
async def test_sigterm_loses_nothing(db: Database, migrated: str, tmp_path: Path) -> None:
    fake = FakePostmark()
    provider = web.Application()
    provider.router.add_post("/email", fake.email)
    fake_server = TestServer(provider)
    await fake_server.start_server()
    env = server_env(
        migrated,
        tmp_path,
        SECRET,
        QUEUES_ENABLED="true",
        NOTIFICATIONS_SSE_ENABLED="true",
        TENANTD_EVENT_MODULES=EVENT_MODULE,
        PYTHONPATH=str(REPO),
        EMAIL_PROVIDER="postmark",
        POSTMARK_SERVER_TOKEN="fake-token",
        POSTMARK_API_URL=str(fake_server.make_url("")).rstrip("/"),
        TENANTD_JOB_POLL_SECONDS="0.05",
        TENANTD_JOB_STOP_TIMEOUT_SECONDS="1",
        TENANTD_SSE_TICK_SECONDS="30",
        TENANTD_SCHEDULER_ENABLED="false",
    )
    settings = load_settings(environ=env)
    factory = Factory(db, settings)
    user = await factory.user()
    cookies = await factory.cookies(user)
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in cookies.items())}
    try:
        first = start_server("first", env, tmp_path)
        async with running([first]), aiohttp.ClientSession() as http:
            stream = await http.get(first.url + "/api/v1/notifications/stream", headers=headers)
            assert stream.status == 200
            async with open_services(settings, migrated) as services:
                # Delivered live to the attached stream (proves it is attached).
                await send(
                    services.notifications,
                    "ping.simple",
                    recipient_user_id=user.id,
                    payload={"n": 1},
                )
                [frame] = await read_sse(stream, 1)
                assert frame["notification"]["title"] == "Ping 1"
                # An email job that is running (the provider hangs) at SIGTERM ...
                await send(
                    services.notifications,
                    "report.ready",
                    recipient_user_id=user.id,
                    payload={"reportName": "Q3", "rows": 3},
                )
                await eventually(lambda: asyncio.sleep(0, fake.calls >= 1))
                # ... and a job still queued (due later) at SIGTERM. Submitted and
                # postponed in one transaction: the runner polls every 50 ms and must
                # never see it due.
                async with services.db.transaction() as conn:
                    [job_id] = await services.jobs.enqueue(
                        conn,
                        "notifications.dispatch",
                        {
                            "notificationId": "00000000-0000-4000-8000-000000000001",
                            "eventType": "ping.simple",
                            "recipientUserId": str(user.id),
                            "payload": {"n": 2},
                        },
                    )
                    await conn.execute(
                        "UPDATE jobs SET run_at = now() + interval '3 s' WHERE id = %(id)s",
                        {"id": job_id},
                    )
            started = time.monotonic()
            first.terminate()
            # The stream ends promptly instead of holding the shutdown (keep-alives are 30 s
            # apart here, the process's bound is 25 s: 15 s is generous and still tells).
            async with asyncio.timeout(15):
                rest = await stream.content.read()
            assert b"data:" not in rest
            exit_code = await asyncio.to_thread(first.wait, 30)
            took = time.monotonic() - started
        assert exit_code == 0, first.log()
        # Within the process's own bound (25 s, systemd's TimeoutStopSec is a little longer);
        # the job stop timeout is 1 s, so the hung provider call did not hold it.
        assert took < ProcessSettings().shutdown_timeout_seconds, first.log()
        # Nothing is running any more: the hung email went back to the queue, the queued
        # one was never touched.
        rows = await db.fetch_all("SELECT kind, status, locked_by FROM jobs ORDER BY id")
        by_kind = {(r["kind"], r["status"]) for r in rows}
        assert ("notifications.email", "queued") in by_kind, rows
        assert not any(r["status"] == "running" for r in rows), rows
        assert all(r["locked_by"] is None for r in rows if r["status"] == "queued"), rows

        # A second instance picks everything up once the provider is back.
        fake.hang = False
        second = start_server("second", env, tmp_path)
        async with running([second]):

            async def all_done() -> bool:
                statuses = await db.fetch_all("SELECT status FROM jobs")
                return all(r["status"] == "done" for r in statuses)

            await eventually(all_done)
        assert fake.accepted == [user.email]
        titles = await db.fetch_all(
            "SELECT title FROM notifications WHERE user_id = %(u)s ORDER BY title", {"u": user.id}
        )
        assert [r["title"] for r in titles] == ["Ping 1", "Ping 2", "Report Q3 is ready"]
        email = await db.fetch_val(
            "SELECT status FROM notification_deliveries WHERE channel = 'email'"
        )
        assert email == "sent"
    finally:
        await fake_server.close()


def test_systemd_stop_timeout_matches_the_in_process_bound() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read(REPO / "systemd" / "tenantd.service")
    stop_timeout = float(unit["Service"]["TimeoutStopSec"])
    bound = ProcessSettings().shutdown_timeout_seconds
    # systemd waits a little longer than the process's own bound, never less.
    assert bound + 3 <= stop_timeout <= bound + 10
    assert unit["Service"]["KillSignal"] == "SIGTERM"
    # Each step of the shutdown fits inside the bound on its own.
    jobs = load_settings(environ={"SECRET_KEY": SECRET}).section(JobSettings).stop_timeout_seconds
    drain = ProcessSettings().shutdown_drain_seconds
    for step in (SHUTDOWN_TIMEOUT, jobs, INLINE_DRAIN_SECONDS, STOP_WAIT_SECONDS, drain):
        assert step < bound


def test_watchdog_fires_only_when_armed_and_not_disarmed() -> None:
    fired: list[str] = []
    quick = Watchdog(0.05, lambda: fired.append("quick"))
    quick.arm()
    disarmed = Watchdog(0.05, lambda: fired.append("disarmed"))
    disarmed.arm()
    disarmed.disarm()
    Watchdog(0.05, lambda: fired.append("never armed"))
    deadline = time.monotonic() + 30
    while not fired:  # wait for the armed one, however busy the machine
        assert time.monotonic() < deadline, "the armed watchdog never fired"
        time.sleep(0.01)
    time.sleep(0.3)  # the others had the same 0.05 s: give them a chance to misfire
    assert fired == ["quick"]


async def test_a_failing_cleanup_still_disarms_the_watchdog(
    migrated: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resource whose cleanup raises must not leave the bound armed: it would end the
    process (a test run, an embedding application) long after the app was gone."""
    from tenantd.app.factory import create_app

    armed: list[Watchdog] = []
    disarmed: list[Watchdog] = []
    original_arm, original_disarm = Watchdog.arm, Watchdog.disarm

    def arm(self: Watchdog) -> None:
        armed.append(self)
        original_arm(self)

    def disarm(self: Watchdog) -> None:
        disarmed.append(self)
        original_disarm(self)

    monkeypatch.setattr(Watchdog, "arm", arm)
    monkeypatch.setattr(Watchdog, "disarm", disarm)

    async def failing_cleanup(app: web.Application) -> AsyncIterator[None]:
        yield
        raise RuntimeError("a resource that fails to close")

    settings = load_settings(environ={"SECRET_KEY": SECRET, "DATABASE_URL": migrated})
    app = create_app(settings, migrated)
    app.cleanup_ctx.append(failing_cleanup)
    runner = web.AppRunner(app)
    await runner.setup()
    with pytest.raises(RuntimeError, match="fails to close"):
        await runner.cleanup()
    assert len(armed) == 1 and disarmed == armed
