"""HTTP-level defences on the auth routes: CSRF, content type, size, validation, secrets at rest."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from tenantd.db import Database
from tenantd.identity.tokens import token_hash
from tests.auth.helpers import last_token, mail_sent, register, set_cookies
from tests.helpers import ORIGIN, PASSWORD, SECRET, error_of


async def test_cookie_carrying_mutation_from_a_foreign_origin_is_refused(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    evil = await make_client(cookies=cookies, origin="https://evil.example")
    for path in ("/api/v1/auth/logout", "/api/v1/auth/logout-all", "/api/v1/auth/refresh"):
        response = await evil.post(path)
        assert response.status == 403, path
        assert error_of(await response.json())["code"] == "FORBIDDEN"
    null_origin = await make_client(cookies=cookies, origin="null")
    assert (await null_origin.post("/api/v1/auth/logout")).status == 403
    # The session survived every refused attempt.
    assert (await (await make_client(cookies=cookies)).get("/test/required")).status == 200


async def test_no_origin_and_no_referer_is_refused_but_an_allowed_referer_passes(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    bare = await make_client(cookies=cookies, origin=None)
    refused = await bare.post("/api/v1/auth/logout")
    assert refused.status == 403
    foreign_referer = await bare.post(
        "/api/v1/auth/logout", headers={"Referer": "https://evil.example/page"}
    )
    assert foreign_referer.status == 403
    allowed_referer = await bare.post(
        "/api/v1/auth/logout", headers={"Referer": f"{ORIGIN}/settings"}
    )
    assert allowed_referer.status == 200


async def test_allowed_origin_passes_and_reads_need_no_origin(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    cookies = await factory.cookies(user)
    bare = await make_client(cookies=cookies, origin=None)
    assert (await bare.get("/api/v1/users/me")).status == 200
    same_site = await make_client(cookies=cookies, origin=ORIGIN)
    assert (await same_site.post("/api/v1/auth/refresh")).status == 200


async def test_cookie_carrying_login_from_a_foreign_origin_is_refused(
    make_client: Any, factory: Any
) -> None:
    user = await factory.user()
    evil = await make_client(cookies=await factory.cookies(user), origin="https://evil.example")
    response = await evil.post(
        "/api/v1/auth/login", json={"email": user.email, "password": user.password}
    )
    assert response.status == 403


async def test_non_json_content_type_is_415(client: Any) -> None:
    form = await client.post(
        "/api/v1/auth/login", data={"email": "a@example.com", "password": PASSWORD}
    )
    assert form.status == 415
    assert error_of(await form.json())["code"] == "UNSUPPORTED_MEDIA_TYPE"
    text = await client.post(
        "/auth/register",
        data=json.dumps({"email": "a@example.com", "password": PASSWORD}),
        headers={"Content-Type": "text/plain"},
    )
    assert text.status == 415


async def test_bodies_over_one_mebibyte_are_413(client: Any, db: Database) -> None:
    huge = json.dumps({"email": "big@example.com", "password": PASSWORD, "x": "a" * (1 << 20)})
    response = await client.post(
        "/auth/register",
        data=io.BytesIO(huge.encode()),
        headers={"Content-Type": "application/json"},
    )
    assert response.status == 413
    assert error_of(await response.json())["code"] == "PAYLOAD_TOO_LARGE"

    async def chunks() -> Any:
        for _ in range(17):
            yield b"a" * 65536

    streamed = await client.post(
        "/api/v1/auth/login", data=chunks(), headers={"Content-Type": "application/json"}
    )
    assert streamed.status == 413
    assert await db.fetch_val("SELECT count(*) FROM users") == 0


async def test_malformed_json_and_per_field_details(client: Any) -> None:
    broken = await client.post(
        "/api/v1/auth/login", data=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert broken.status == 422
    assert error_of(await broken.json())["details"]["fields"] == {"body": "malformed JSON"}
    array = await client.post("/api/v1/auth/login", json=["a@example.com"])
    assert array.status == 422
    both = await client.post("/api/v1/auth/password-reset/confirm", json={"password": "short"})
    error = error_of(await both.json())
    assert both.status == 422
    assert error["code"] == "VALIDATION_ERROR"
    assert set(error["details"]["fields"]) == {"token", "password"}


async def test_secrets_are_never_stored_raw(make_client: Any, db: Database, mail_dir: Path) -> None:
    browser = await make_client()
    await register(browser, "vault@example.com")
    verify_token = last_token(mail_dir, "vault@example.com")
    verified = await browser.post("/auth/verify-email", json={"token": verify_token})
    refresh_token = set_cookies(verified)["refresh_token"]["value"]
    await browser.post("/api/v1/auth/password-reset/request", json={"email": "vault@example.com"})
    await mail_sent(browser)
    reset_token = last_token(mail_dir, "vault@example.com", "/reset-password")

    # Every text-ish column of every table, as text: no raw secret anywhere.
    dump = await db.fetch_val(
        "SELECT string_agg(t::text, ' ') FROM ("
        " SELECT row_to_json(u)::text AS t FROM users u"
        " UNION ALL SELECT row_to_json(p)::text FROM user_passwords p"
        " UNION ALL SELECT row_to_json(k)::text FROM user_tokens k"
        " UNION ALL SELECT row_to_json(s)::text FROM sessions s"
        " UNION ALL SELECT row_to_json(a)::text FROM audit_log a) rows"
    )
    for secret in (verify_token, refresh_token, reset_token, PASSWORD):
        assert secret not in dump
    session_hash = await db.fetch_val("SELECT token_hash FROM sessions")
    assert bytes(session_hash) == token_hash(SECRET, refresh_token)
    reset_hash = await db.fetch_val(
        "SELECT token_hash FROM user_tokens WHERE purpose = 'password_reset'"
    )
    assert bytes(reset_hash) == token_hash(SECRET, reset_token)
    # The verification token was consumed; its hash was the HMAC too (checked before use).
    await register(browser, "vault2@example.com")
    second = last_token(mail_dir, "vault2@example.com")
    verify_hash = await db.fetch_val(
        "SELECT token_hash FROM user_tokens WHERE purpose = 'verify_email'"
    )
    assert bytes(verify_hash) == token_hash(SECRET, second)


async def test_every_error_code_of_the_flows_has_its_status(
    client: Any, factory: Any, make_client: Any
) -> None:
    """One place listing the codes the auth flows use, with their statuses."""
    unverified = await factory.user(verified=False)
    seen: dict[str, int] = {}

    async def record(response: Any) -> None:
        seen[error_of(await response.json())["code"]] = response.status

    await record(await client.get("/test/required"))
    await record(
        await client.post("/api/v1/auth/login", json={"email": "x@example.com", "password": "p"})
    )
    await record(
        await client.post(
            "/api/v1/auth/login",
            json={"email": unverified.email, "password": unverified.password},
        )
    )
    user = await factory.user()
    evil = await make_client(cookies=await factory.cookies(user), origin="https://evil.example")
    await record(await evil.post("/api/v1/auth/logout"))
    await record(await client.get("/api/v1/no-such-route"))
    await record(await client.post("/auth/verify-email", json={"token": "nope"}))
    await record(await client.post("/auth/verify-email", data=b"x"))
    await record(
        await client.post(
            "/auth/verify-email",
            data=io.BytesIO(b"{" + b" " * (1 << 20) + b"}"),
            headers={"Content-Type": "application/json"},
        )
    )
    await record(await client.get("/test/try-no-branch"))
    assert seen == {
        "UNAUTHORIZED": 401,
        "INVALID_CREDENTIALS": 401,
        "EMAIL_NOT_VERIFIED": 403,
        "FORBIDDEN": 403,
        "NOT_FOUND": 404,
        "VALIDATION_ERROR": 422,
        "UNSUPPORTED_MEDIA_TYPE": 415,
        "PAYLOAD_TOO_LARGE": 413,
        "INTERNAL": 500,
    }
