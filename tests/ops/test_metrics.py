"""/metrics moves with requests and with the tables its refresh task reads; /readyz."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from prometheus_client.parser import text_string_to_metric_families

from tenantd.db import Database
from tenantd.db.migrate import sql_dir
from tests.helpers import eventually

Samples = dict[tuple[str, tuple[Any, ...]], float]


@pytest.fixture
def env(env: dict[str, str]) -> dict[str, str]:
    env["TENANTD_METRICS_REFRESH_SECONDS"] = "0.1"
    return env


async def scrape(
    client: TestClient[Any, Any], **headers: str
) -> dict[tuple[str, tuple[Any, ...]], float]:
    response = await client.get("/metrics", headers=headers)
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(await response.text()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples: dict[tuple[str, tuple[Any, ...]], float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_request_metrics_move(client: TestClient[Any, Any]) -> None:
    before = await scrape(client)
    for _ in range(3):
        assert (await client.get("/api/v1/users/me")).status == 200
    assert (await client.get("/no/such/place/123")).status == 404
    after = await scrape(client)
    me = {"method": "GET", "route": "/api/v1/users/me", "status": "200"}
    assert (
        value(after, "tenantd_http_requests_total", **me)
        - value(before, "tenantd_http_requests_total", **me)
        == 3
    )
    assert value(after, "tenantd_http_request_duration_seconds_count", **me) == 3
    assert value(after, "tenantd_http_request_duration_seconds_bucket", **me, le="+Inf") == 3
    # Unknown paths share one label: no cardinality explosion from scanners.
    unmatched = {"method": "GET", "route": "<unmatched>", "status": "404"}
    assert value(after, "tenantd_http_requests_total", **unmatched) == 1
    assert not any("/no/such/place" in str(key) for key in after)
    assert value(after, "tenantd_database_up") == 1


async def test_unusual_methods_share_one_label(client: TestClient[Any, Any]) -> None:
    # WebDAV verbs get through the HTTP parser; each must not mint its own label set.
    for method in ("PROPFIND", "MKCOL", "LOCK", "PROPFIND"):
        await client.request(method, "/api/v1/users/me")
    samples = await scrape(client)
    other = {
        key: count
        for key, count in samples.items()
        if key[0] == "tenantd_http_requests_total" and ("method", "OTHER") in key[1]
    }
    assert sum(other.values()) == 4, other
    assert not any(m in str(samples) for m in ("PROPFIND", "MKCOL", "LOCK"))


async def test_state_gauges_follow_the_tables(
    client: TestClient[Any, Any], db: Database, factory: Any
) -> None:
    samples = await scrape(client)
    assert value(samples, "tenantd_jobs", status="queued") == 0
    assert value(samples, "tenantd_notification_deliveries", channel="email", status="sent") == 0
    user = await factory.user()
    await db.execute(
        "INSERT INTO jobs (kind, status, run_at) VALUES ('x', 'queued', now() - interval '90 s'),"
        " ('x', 'queued', now() + interval '1 h'), ('x', 'running', now()), ('x', 'failed', now())"
    )
    notification = await db.fetch_val(
        "INSERT INTO notifications (user_id, event_type, title) VALUES (%(u)s, 't', 'T')"
        " RETURNING id",
        {"u": user.id},
    )
    await db.execute(
        "INSERT INTO notification_deliveries (notification_id, channel, status) VALUES"
        " (%(n)s, 'in_app', 'sent'), (%(n)s, 'email', 'suppressed')",
        {"n": notification},
    )
    await db.execute(
        "INSERT INTO email_suppressions (email, reason, provider) VALUES"
        " ('a@example.com', 'hard_bounce', 'resend'), ('b@example.com', 'hard_bounce', 'resend'),"
        " ('c@example.com', 'manual', 'manual')"
    )
    await db.execute(
        "INSERT INTO sweep_runs (name, last_success_at) VALUES ('sessions', to_timestamp(1000))"
    )

    async def refreshed() -> Samples | None:
        samples = await scrape(client)
        swept = value(samples, "tenantd_sweep_last_success_timestamp_seconds", sweep="sessions")
        return samples if swept == 1000 else None

    samples = await eventually(refreshed)  # the refresh task runs every 0.1 s here
    assert value(samples, "tenantd_jobs", status="queued") == 2
    assert value(samples, "tenantd_jobs", status="running") == 1
    assert value(samples, "tenantd_jobs", status="failed") == 1
    assert 85 <= value(samples, "tenantd_jobs_oldest_queued_age_seconds") < 200
    assert value(samples, "tenantd_notification_deliveries", channel="in_app", status="sent") == 1
    assert (
        value(samples, "tenantd_notification_deliveries", channel="email", status="suppressed") == 1
    )
    assert (
        value(samples, "tenantd_email_suppressions", provider="resend", reason="hard_bounce") == 2
    )
    assert value(samples, "tenantd_email_suppressions", provider="manual", reason="manual") == 1
    assert value(samples, "tenantd_sweep_last_success_timestamp_seconds", sweep="sessions") == 1000


async def test_each_app_has_its_own_registry(make_client: Any, aiohttp_client: Any) -> None:
    first = await make_client()
    await first.get("/healthz")
    samples = await scrape(first)
    health = {"method": "GET", "route": "/healthz", "status": "200"}
    assert value(samples, "tenantd_http_requests_total", **health) == 1


class TestMetricsToken:
    @pytest.fixture
    def env(self, env: dict[str, str]) -> dict[str, str]:
        env["TENANTD_METRICS_TOKEN"] = "scrape-me-0123456789"
        return env

    async def test_token_is_required(self, client: TestClient[Any, Any]) -> None:
        assert (await client.get("/metrics")).status == 403
        wrong = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status == 403
        await scrape(client, Authorization="Bearer scrape-me-0123456789")


async def test_readyz_ready(client: TestClient[Any, Any]) -> None:
    response = await client.get("/readyz")
    assert response.status == 200
    body = await response.json()
    assert body == {"status": "ready", "checks": {"database": "ok", "migrations": "ok"}}


class TestWithPendingMigrations:
    @pytest.fixture
    def env(self, env: dict[str, str], tmp_path: Path) -> dict[str, str]:
        folder = tmp_path / "sql"
        folder.mkdir()
        for path in sql_dir().glob("*.sql"):
            (folder / path.name).write_text(path.read_text())
        (folder / "9999_later.sql").write_text("SELECT 1;")
        env["TENANTD_SQL_DIR"] = str(folder)
        return env

    async def test_readyz_not_ready_with_pending_migrations(
        self, client: TestClient[Any, Any]
    ) -> None:
        response = await client.get("/readyz")
        assert response.status == 503
        body = await response.json()
        assert body["status"] == "not_ready"
        assert body["checks"]["migrations"] == "pending"
        assert body["checks"]["pendingMigrations"] == ["9999_later"]


class TestWithSse:
    @pytest.fixture
    def env(self, env: dict[str, str]) -> dict[str, str]:
        env["NOTIFICATIONS_SSE_ENABLED"] = "true"
        env["TENANTD_SSE_TICK_SECONDS"] = "0.2"
        return env

    async def test_readyz_checks_the_listener(
        self, client: TestClient[Any, Any], app: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        from tenantd.notifications.channels.sse.feed import FEED_KEY

        response = await client.get("/readyz")
        assert response.status == 200
        assert (await response.json())["checks"]["sseListener"] == "ok"
        monkeypatch.setattr(app[FEED_KEY].hub, "is_connected", lambda: False)
        response = await client.get("/readyz")
        assert response.status == 503
        assert (await response.json())["checks"]["sseListener"] == "disconnected"

    async def test_sse_clients_gauge(
        self, client: TestClient[Any, Any], make_client: Any, factory: Any
    ) -> None:
        assert value(await scrape(client), "tenantd_sse_clients") == 0
        user = await factory.user()
        browser = await make_client(cookies=await factory.cookies(user))
        stream = await browser.get("/api/v1/notifications/stream")
        assert stream.status == 200
        await stream.content.readany()  # first keep-alive: the stream is attached
        assert value(await scrape(client), "tenantd_sse_clients") == 1
        stream.close()
        for _ in range(300):  # up to 30 s: noticed at once, but the machine may be busy
            if value(await scrape(client), "tenantd_sse_clients") == 0:
                break
            await asyncio.sleep(0.1)
        assert value(await scrape(client), "tenantd_sse_clients") == 0
