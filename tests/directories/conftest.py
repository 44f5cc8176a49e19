"""Directory fixtures: a team account with a SCIM directory, and a SCIM client holding its
bearer token (no cookie: the token is the only credential)."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp.test_utils import TestServer

from tests.accounts.conftest import login, make_team  # noqa: F401 (fixtures)
from tests.accounts.helpers import Team
from tests.helpers import data


@dataclass
class Directory:
    team: Team
    id: uuid.UUID
    token: str
    base: str  # the SCIM base path, /scim/v2/<id>
    scim: Any  # an HTTP client sending the directory's bearer token


SCIM_JSON = "application/scim+json"


@pytest.fixture
def make_directory(
    server: TestServer, aiohttp_client: Any
) -> Callable[[Team], Awaitable[Directory]]:
    async def make(team: Team) -> Directory:
        created = await data(
            await team.owner_client.post(
                f"/api/v1/accounts/{team.account_id}/directories", json={"name": "Okta"}
            ),
            201,
        )
        headers = {"Authorization": f"Bearer {created['token']}", "Content-Type": SCIM_JSON}
        scim = await aiohttp_client(server, headers=headers)
        return Directory(
            team=team,
            id=uuid.UUID(created["id"]),
            token=created["token"],
            base=f"/scim/v2/{created['id']}",
            scim=scim,
        )

    return make


@pytest.fixture
async def directory(
    make_team: Callable[..., Awaitable[Team]],  # noqa: F811
    make_directory: Callable[[Team], Awaitable[Directory]],
) -> Directory:
    return await make_directory(await make_team())


def scim_user(user_name: str, **extra: Any) -> dict[str, Any]:
    """A User as an identity provider sends it."""
    return {
        "schemas": ["urn:ietf:params:scim:schemas:core:2.0:User"],
        "userName": user_name,
        "active": True,
        **extra,
    }


async def scim_json(response: Any, status: int = 200) -> Any:
    body = await response.json(content_type=None)
    assert response.status == status, body
    if response.status != 204:
        assert response.headers["Content-Type"].startswith(SCIM_JSON)
    return body
