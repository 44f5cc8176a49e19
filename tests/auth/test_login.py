"""POST /api/v1/auth/login."""

from __future__ import annotations

from typing import Any

from argon2 import PasswordHasher

from tenantd.db import Database
from tenantd.identity import passwords
from tests.auth.helpers import set_cookies
from tests.helpers import access_claims, error_of


async def test_login_sets_both_cookies_and_lands_in_the_owned_account(
    make_client: Any, factory: Any
) -> None:
    owner = await factory.user(first_name="Ada")
    other = await factory.user()
    # A membership in someone else's account created earlier must not win over the owned one.
    await factory.member(other.account_id, owner.id, "admin")
    browser = await make_client()
    response = await browser.post(
        "/api/v1/auth/login", json={"email": owner.email.upper(), "password": owner.password}
    )
    body = await response.json()
    assert response.status == 200, body
    assert body["data"]["user"]["id"] == str(owner.id)
    assert body["data"]["user"]["firstName"] == "Ada"
    assert set(body["data"]) == {"user"}
    cookies = set_cookies(response)
    claims = access_claims(browser, cookies["auth_token"]["value"])
    assert claims.user_id == owner.id
    assert claims.account_id == owner.account_id
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["account"]["id"] == str(owner.account_id)
    assert me["role"] == "owner"


async def test_member_only_user_lands_in_its_only_account(make_client: Any, factory: Any) -> None:
    boss = await factory.user()
    member = await factory.user(account=False)
    await factory.member(boss.account_id, member.id, "member")
    browser = await make_client()
    response = await browser.post(
        "/api/v1/auth/login", json={"email": member.email, "password": member.password}
    )
    claims = access_claims(browser, set_cookies(response)["auth_token"]["value"])
    assert claims.account_id == boss.account_id


async def test_unknown_email_and_wrong_password_are_the_same_401(
    client: Any, factory: Any, monkeypatch: Any
) -> None:
    user = await factory.user()
    verified_against: list[str | None] = []
    real_verify = passwords._verify

    def spy(password_hash: str | None, password: str) -> bool:
        verified_against.append(password_hash)
        return real_verify(password_hash, password)

    monkeypatch.setattr(passwords, "_verify", spy)
    wrong = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": "not the password"}
    )
    unknown = await client.post(
        "/api/v1/auth/login", json={"email": "ghost@example.com", "password": "whatever it is"}
    )
    assert wrong.status == unknown.status == 401
    wrong_body, unknown_body = await wrong.json(), await unknown.json()
    assert wrong_body == unknown_body
    assert error_of(wrong_body)["code"] == "INVALID_CREDENTIALS"
    assert set_cookies(wrong) == {} and set_cookies(unknown) == {}
    # The unknown email still paid for an argon2 verify (against the dummy hash).
    assert len(verified_against) == 2
    assert verified_against[1] is None


async def test_unverified_email_is_refused_only_after_the_password_checks_out(
    client: Any, factory: Any
) -> None:
    user = await factory.user(verified=False)
    wrong = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": "not the password"}
    )
    assert wrong.status == 401
    assert error_of(await wrong.json())["code"] == "INVALID_CREDENTIALS"
    right = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert right.status == 403
    assert error_of(await right.json())["code"] == "EMAIL_NOT_VERIFIED"
    assert set_cookies(right) == {}


async def test_user_without_a_password_cannot_log_in_with_one(client: Any, factory: Any) -> None:
    user = await factory.user(password=None)
    for attempt in ("", "anything at all", passwords.MIN_LENGTH * "x"):
        response = await client.post(
            "/api/v1/auth/login", json={"email": user.email, "password": attempt}
        )
        assert response.status in (401, 422)
    response = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": "tenantd-dummy-password"}
    )
    assert response.status == 401  # the dummy hash's password is no master key


async def test_login_rehashes_when_the_argon2_parameters_changed(
    client: Any, factory: Any, db: Database
) -> None:
    user = await factory.user()
    weak = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1).hash(user.password)
    await db.execute(
        "UPDATE user_passwords SET password_hash = %(h)s WHERE user_id = %(u)s",
        {"h": weak, "u": user.id},
    )
    assert passwords.needs_rehash(weak)
    response = await client.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert response.status == 200
    stored = await db.fetch_val(
        "SELECT password_hash FROM user_passwords WHERE user_id = %(u)s", {"u": user.id}
    )
    assert stored != weak
    assert not passwords.needs_rehash(stored)
    assert PasswordHasher().verify(stored, user.password)


async def test_login_validation(client: Any) -> None:
    for payload, field in (
        ({"email": "nope", "password": "whatever"}, "email"),
        ({"email": "a@example.com"}, "password"),
        ({"email": "a@example.com", "password": "p" * 257}, "password"),
    ):
        response = await client.post("/api/v1/auth/login", json=payload)
        assert response.status == 422
        assert field in error_of(await response.json())["details"]["fields"]


async def test_verified_user_without_an_account_gets_a_session_without_aid(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user(account=False)
    browser = await make_client()
    response = await browser.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert response.status == 200
    claims = access_claims(browser, set_cookies(response)["auth_token"]["value"])
    assert claims.account_id is None
    me = await (await browser.get("/api/v1/users/me")).json()
    assert me["user"]["id"] == str(user.id)
    assert me["account"] is None
