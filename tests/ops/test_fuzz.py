"""Schemathesis against /api/v1/openapi.json of a real `tenantd serve`: no 5xx, every status,
content type, header and body as documented. Bounded (a few examples per operation) and
derandomized, so a run is reproducible and short.

Every case carries a fresh signed-in session (a case may log out or cut every session off),
so authenticated operations are exercised past the guard.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.request
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tenantd.db.core import create_database
from tenantd.db.dsn import url_to_dsn
from tenantd.settings import load_settings
from tenantd.web.app import create_app
from tenantd.web.openapi import build_openapi
from tenantd.web.routing import ROUTE_SPEC
from tests.conftest import SECRET
from tests.factories import Factory, UserRecord
from tests.ops.servers import ORIGIN, Server, server_env, start_server

T = TypeVar("T")

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    ignored_auth,
]


class Background:
    """An event loop in a thread, so sync schemathesis tests can use the async factory."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


class Sessions:
    def __init__(self, factory: Factory, background: Background, user: UserRecord):
        self.factory = factory
        self.background = background
        self.user = user

    def cookie_header(self) -> str:
        cookies = self.background.run(self.factory.cookies(self.user))
        return "; ".join(f"{name}={value}" for name, value in cookies.items())


def wait_ready(server: Server, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        assert server.process.poll() is None, server.log()
        try:
            with urllib.request.urlopen(server.url + "/readyz", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise AssertionError(server.log())


@pytest.fixture(scope="module")
def fuzz_server(migrated: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    directory: Path = tmp_path_factory.mktemp("fuzz")
    env = server_env(
        migrated,
        directory,
        SECRET,
        NOTIFICATIONS_SSE_ENABLED="true",
        TENANTD_SCHEDULER_ENABLED="false",
        RATE_LIMIT_ENABLED="false",  # reach the views; limits have their own tests
        LOG_LEVEL="error",
    )
    server = start_server("fuzz", env, directory)
    try:
        wait_ready(server)
        yield server.url
    finally:
        server.terminate()
        server.wait(30)


@pytest.fixture(scope="module")
def sessions(migrated: str, fuzz_server: str) -> Iterator[Sessions]:
    background = Background()
    db = background.run(create_database(url_to_dsn(migrated), minsize=1, maxsize=2))
    factory = Factory(db, load_settings(environ={"SECRET_KEY": SECRET}))
    user = background.run(factory.user(plan="team"))
    try:
        yield Sessions(factory, background, user)
    finally:
        background.run(db.close())
        background.close()


def local_document() -> dict[str, Any]:
    """The document the server serves, built from the same route table in this process
    (schemathesis' lazy fixture loader does not work with this pytest; a test below checks
    the served document is this one)."""
    app = create_app(load_settings(environ={"SECRET_KEY": SECRET}), "postgresql:///unused")
    return build_openapi(app[ROUTE_SPEC])


DOCUMENT = local_document()
schema = schemathesis.openapi.from_dict(DOCUMENT)
# Valid and invalid inputs: invalid ones must be refused with a documented 4xx, never a 5xx.
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


def test_served_document_is_the_fuzzed_one(fuzz_server: str) -> None:
    with urllib.request.urlopen(fuzz_server + "/api/v1/openapi.json", timeout=5) as response:
        assert json.loads(response.read()) == DOCUMENT


@pytest.mark.slow
@schema.exclude(path="/api/v1/notifications/stream").parametrize()
@settings(
    max_examples=8,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_api_matches_its_openapi_document(case: Any, fuzz_server: str, sessions: Sessions) -> None:
    headers = {"Origin": ORIGIN}
    if case.operation.definition.raw.get("security"):
        headers["Cookie"] = sessions.cookie_header()
    response = case.call(base_url=fuzz_server, headers=headers, timeout=10)
    case.validate_response(response, checks=CHECKS)
