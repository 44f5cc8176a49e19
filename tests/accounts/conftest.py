"""Tenancy fixtures: signed-in browsers and a team account with owner, admin and member."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.accounts.helpers import Login, Team
from tests.factories import Factory, UserRecord


@pytest.fixture
def login(make_client: Any, factory: Factory) -> Login:
    """A browser signed in as `user` with the token's aid = `account_id` (default: own)."""

    async def make(user: UserRecord, account_id: uuid.UUID | None = None) -> Any:
        client = await make_client()
        # Host-scoped like cookies a real response sets, so Set-Cookie replaces them.
        client.session.cookie_jar.update_cookies(
            await factory.cookies(user, account_id), response_url=client.make_url("/")
        )
        return client

    return make


@pytest.fixture
def make_team(factory: Factory, login: Login) -> Callable[..., Awaitable[Team]]:
    async def make(plan: str = "team") -> Team:
        # No passwords: argon2 hashing is the slow part of a factory user and nobody logs in.
        owner = await factory.user(plan=plan, password=None)
        admin = await factory.user(password=None)
        member = await factory.user(password=None)
        assert owner.account_id is not None
        await factory.member(owner.account_id, admin.id, "admin")
        await factory.member(owner.account_id, member.id, "member")
        return Team(
            account_id=owner.account_id,
            owner=owner,
            admin=admin,
            member=member,
            owner_client=await login(owner),
            admin_client=await login(admin, owner.account_id),
            member_client=await login(member, owner.account_id),
        )

    return make


@pytest.fixture
async def team(make_team: Callable[..., Awaitable[Team]]) -> Team:
    return await make_team()
