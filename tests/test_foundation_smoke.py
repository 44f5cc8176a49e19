from __future__ import annotations

from typing import Any


async def test_healthz(client: Any) -> None:
    response = await client.get("/healthz")
    assert response.status == 200
    assert await response.json() == {"status": "ok"}


async def test_me_anonymous_and_signed_in(client: Any, make_client: Any, factory: Any) -> None:
    response = await client.get("/api/v1/users/me")
    assert response.status == 200
    assert await response.json() == {"user": None}
    user = await factory.user(first_name="Ada", last_name="Lovelace")
    signed = await make_client(cookies=await factory.cookies(user))
    response = await signed.get("/api/v1/users/me")
    body = await response.json()
    assert response.status == 200, body
    assert body["user"]["email"] == user.email
    assert body["account"]["id"] == str(user.account_id)
    assert body["role"] == "owner"
    assert body["hasPasswordLogin"] is True
    assert body["authProviders"][0]["provider"] == "password"
