"""One `tenantd serve` per module for the clients' tests, with a verified user (signed up
through the API and its emailed link) and an API key for the server routes."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.helpers import PASSWORD
from tests.ui.live import WAIT, LiveServer, start_server, unique_email

SCOPES = "notifications:send,events:read,webhooks:manage,sessions:introspect"


@dataclass(frozen=True)
class Seeded:
    server: LiveServer
    email: str
    password: str
    api_key: str


@pytest.fixture(scope="module")
def live_env() -> dict[str, str]:
    return {
        "TENANTD_OUTBOX_POLL_SECONDS": "0.05",  # webhook test events leave at once
        "TENANTD_JOB_POLL_SECONDS": "0.05",
    }


@pytest.fixture(scope="module")
def live(
    migrated: str, tmp_path_factory: pytest.TempPathFactory, live_env: dict[str, str]
) -> Iterator[LiveServer]:
    server = start_server(migrated, tmp_path_factory.mktemp("clients"), **live_env)
    try:
        yield server
    finally:
        server.stop()


def verified_user(server: LiveServer) -> str:
    """A user signed up through the API, its address verified through the emailed link from
    the same browser (its registration-binding cookie installs the password)."""
    address = unique_email("client")
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor())

    def post(path: str, body: dict[str, str]) -> None:
        request = urllib.request.Request(
            server.url(path),
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Origin": server.base},
            method="POST",
        )
        with browser.open(request, timeout=WAIT) as response:
            assert response.status in (200, 201, 202), response.read()

    post("/auth/register", {"email": address, "password": PASSWORD})
    link = server.mail_to(address, "/verify-email?token=")
    found = re.search(r"token=([^&\s]+)", link)
    assert found, link
    post("/auth/verify-email", {"token": urllib.parse.unquote(found.group(1))})
    return address


@pytest.fixture(scope="module")
def seeded(live: LiveServer) -> Seeded:
    address = verified_user(live)
    out = live.cli("api-keys", "create", "--name", "clients-test", "--scopes", SCOPES)
    key = re.search(r"tdk_\S+", out)
    assert key, out
    return Seeded(server=live, email=address, password=PASSWORD, api_key=key.group(0))
