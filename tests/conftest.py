"""Test harness: a real PostgreSQL (private cluster unless DATABASE_URL is set; one database
per pytest-xdist worker), migrated once per run, emptied before every test; one app per test
with the real services."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg2.extensions
import psycopg2.extras
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from bench.private_servers import migrate_url
from tenantd.app.bundle import Domains
from tenantd.app.factory import create_app
from tenantd.app.settings import AppSettings, load_settings
from tenantd.bundle import DOMAINS
from tenantd.db import Database
from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.db.embedded import EmbeddedCluster
from tenantd.db.relay import publishing
from tenantd.email.settings import MailSettings
from tenantd.settings import Settings
from tests.email.fake_providers import FakeProviders
from tests.factories import Factory
from tests.helpers import ORIGIN, SECRET, truncate_all
from tests.ops.servers import fresh_database

pytest_plugins = ["tests.timeouts"]  # pytest-timeout's signal method, for asyncio and xdist

# Tests never read the host's service configuration (/etc/tenantd/tenantd.env, the CLI's
# default env file): they pass their settings explicitly.
os.environ.setdefault("TENANTD_ENV_FILE", "")


@pytest.fixture(autouse=True)
def dicts_stay_jsonb() -> Iterator[None]:
    """aiopg.connect's default (enable_hstore=True) makes psycopg2 adapt every dict as hstore
    in the whole worker, even on a database without hstore: the tests after it then fail far
    from the cause (a run saw 101). The test that did it fails here instead."""
    yield
    adapter = psycopg2.extensions.adapters.get((dict, psycopg2.extensions.ISQLQuote))
    assert adapter is not psycopg2.extras.HstoreAdapter, (
        "this test made dicts hstore for the worker: connect with enable_hstore=False"
    )


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    """The run's database: a private cluster's, or DATABASE_URL's. Every test empties it, so
    each pytest-xdist worker has its own: its private cluster, or a database of its own made
    next to DATABASE_URL's on that server."""
    url = os.environ.get("DATABASE_URL")
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ... under pytest-xdist
    if url and worker:
        with fresh_database(url, worker_database_name(url, worker)) as own:
            yield own
        return
    if url:
        yield url
        return
    root = Path(tempfile.mkdtemp(prefix="tenantd-test-"))
    cluster = EmbeddedCluster(root / "pg")
    cluster.start()
    try:
        yield cluster.url
    finally:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)


def worker_database_name(url: str, worker: str) -> str:
    """`tenantd_test` + `_gw1` for worker gw1: a plain identifier (no quoting needed)."""
    name = unquote(urlsplit(url).path.lstrip("/")) or "tenantd"
    return re.sub(r"[^a-z0-9_]", "_", f"{name[:40]}_{worker}".lower())


@pytest.fixture(scope="session")
def migrated(database_url: str) -> str:
    asyncio.run(migrate_url(database_url))
    return database_url


@pytest.fixture
def db_relays(request: pytest.FixtureRequest) -> bool:
    """Whether the test's pool publishes what its commits announce, as a tenantd process
    does (tenantd/db/relay.py); a test of the relays themselves (marked `own_relays`) runs
    none, and neither does one whose app runs on another bus (TENANTD_BUS=nats or redis):
    the pool's relay would publish with PostgreSQL's NOTIFY rows the apps' relays must hand
    to their bus (the apps' relays publish the test's own rows too)."""
    if request.node.get_closest_marker("own_relays") is not None:
        return False
    if "env" in request.fixturenames:
        env: dict[str, str] = request.getfixturevalue("env")
        return env.get("TENANTD_BUS", "postgres") == "postgres"
    return True


@pytest.fixture
async def db(migrated: str, db_relays: bool) -> AsyncIterator[Database]:
    database = await create_database(url_to_dsn(migrated), minsize=1, maxsize=5)
    await truncate_all(database)
    try:
        if db_relays:
            async with publishing(database):
                yield database
        else:
            yield database
    finally:
        await database.close()


@pytest.fixture
def env(tmp_path: Path, migrated: str) -> dict[str, str]:
    """The environment a test's settings are built from; tests may edit it before `app`."""
    return {
        "TENANTD_DATA_DIR": str(tmp_path),
        "DATABASE_URL": migrated,
        "SECRET_KEY": SECRET,
        "PUBLIC_BASE_URL": ORIGIN,
        "COOKIE_SECURE": "false",
        "EMAIL_PROVIDER": "file",
        "EMAIL_FILE_DIR": str(tmp_path / "mail"),
        "LOG_LEVEL": "warning",
        # Sweeps would delete rows other tests set up; tests/ops turns the scheduler on.
        "TENANTD_SCHEDULER_ENABLED": "false",
    }


@pytest.fixture
def settings(env: dict[str, str]) -> AppSettings:
    return load_settings(environ=env)


@pytest.fixture
async def server(
    db: Database, settings: Settings, migrated: str, aiohttp_server: Any
) -> TestServer:
    app: web.Application = create_app(settings, migrated)
    return await aiohttp_server(app)


ClientMaker = Callable[..., Awaitable[TestClient[Any, Any]]]


@pytest.fixture
def make_client(server: TestServer, aiohttp_client: Any) -> ClientMaker:
    """A fresh browser: own cookie jar, same-origin Origin header by default."""

    async def make(cookies: dict[str, str] | None = None, origin: str | None = ORIGIN) -> Any:
        headers = {"Origin": origin} if origin else {}
        client = await aiohttp_client(server, headers=headers)
        if cookies:
            client.session.cookie_jar.update_cookies(cookies)
        return client

    return make


@pytest.fixture
async def client(make_client: ClientMaker) -> TestClient[Any, Any]:
    return await make_client()


@pytest.fixture
def app(server: TestServer) -> web.Application:
    return server.app


@pytest.fixture
def services(app: web.Application) -> Domains:
    """The running app's services (tests/ops has `standalone_services`, opened without an app)."""
    return app[DOMAINS]


@pytest.fixture
def factory(db: Database, settings: Settings) -> Factory:
    return Factory(db, settings)


@pytest.fixture
async def fake(aiohttp_server: Any) -> FakeProviders:
    """Postmark, Resend and SendGrid on a local port (tests/email/fake_providers.py)."""
    providers = FakeProviders()
    server: TestServer = await aiohttp_server(providers.app)
    providers.url = str(server.make_url("")).rstrip("/")
    return providers


@pytest.fixture
def mail_dir(settings: Settings) -> Path:
    return settings.section(MailSettings).email_file_dir


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test has a node id of its own: pytest-xdist hands tests out by id, and tests that
    share one never run there while the run still passes (schemathesis once named all its
    operations' tests alike)."""
    seen: dict[str, int] = {}
    for item in items:
        seen[item.nodeid] = seen.get(item.nodeid, 0) + 1
    shared = sorted(nodeid for nodeid, count in seen.items() if count > 1)
    if shared:
        raise pytest.UsageError(f"tests that share a node id: {', '.join(shared[:5])}")
