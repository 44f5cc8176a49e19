"""SSO fixtures: the auth probe server (no abuse limiter, cheap argon2id), a team account,
signed-in browsers, and a SAML identity provider built with pysaml2."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.accounts.helpers import Login, Team
from tests.factories import Factory, UserRecord
from tests.identity.probes import cheap_argon2, env, server
from tests.sso.saml_idp import SamlIdp

__all__ = ["cheap_argon2", "env", "server"]


@pytest.fixture
def login(make_client: Any, factory: Factory) -> Login:
    """A browser signed in as `user` with the token's aid = `account_id` (default: own)."""

    async def make(user: UserRecord, account_id: uuid.UUID | None = None) -> Any:
        client = await make_client()
        client.session.cookie_jar.update_cookies(
            await factory.cookies(user, account_id), response_url=client.make_url("/")
        )
        return client

    return make


@pytest.fixture
def make_team(factory: Factory, login: Login) -> Callable[..., Awaitable[Team]]:
    async def make(plan: str = "team", domain: str = "acme.example.com") -> Team:
        owner = await factory.user(email=f"owner@{domain}", plan=plan, password=None)
        admin = await factory.user(email=f"admin@{domain}", password=None)
        member = await factory.user(email=f"member@{domain}", password=None)
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


@pytest.fixture
def saml_idp(tmp_path: Path) -> SamlIdp:
    return SamlIdp(tmp_path)
