"""The SCIM endpoints against scim2-tester, a compliance checker tenantd did not write: every
check it runs (discovery, the random URL, create, read, query, replace, PATCH add, replace and
remove, delete of Users and Groups) passes, none errors."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from aiohttp.test_utils import TestServer
from scim2_client import BaseSyncSCIMClient
from scim2_tester import Status, check_server

from tests.directories.conftest import Directory


class HttpxSCIMClient(BaseSyncSCIMClient):
    """scim2-client's synchronous client sending over an `httpx.Client`."""

    def __init__(self, client: httpx.Client, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.client = client

    def _stays_under_base_url(self, endpoint: str) -> bool:
        base = self.client.base_url
        url = self.client.build_request("GET", endpoint).url
        return (
            url.scheme == base.scheme
            and url.host == base.host
            and (url.raw_path.startswith(base.raw_path))
        )

    def _parse_json(self, response: Any) -> Any:
        return response.json()

    def request(self, method: str, url: str, **kwargs: Any) -> Any:
        return self.client.request(method, url, **kwargs)


def run_checker(base_url: str, token: str) -> list[Any]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=30) as http:
        client = HttpxSCIMClient(http)
        return check_server(client)


async def test_scim2_tester_finds_no_error(server: TestServer, directory: Directory) -> None:
    base_url = str(server.make_url(directory.base + "/"))
    # The checker is synchronous: it runs in a thread while this loop serves its requests.
    results = await asyncio.to_thread(run_checker, base_url, directory.token)
    failed = [r for r in results if r.status is not Status.SUCCESS]
    assert results
    assert not failed, "\n".join(f"{r.resource_type} {r.title}: {r.reason}" for r in failed)
    assert sum(r.status == Status.SUCCESS for r in results) >= 20
    assert not [r for r in results if r.status == Status.SKIPPED]
