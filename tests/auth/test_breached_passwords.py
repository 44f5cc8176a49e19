"""PASSWORD_BREACH_CHECK (issue 29): new passwords are looked up in a Pwned Passwords range API
(a local fake speaking its wire format, padding included) at registration, reset and change."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from tenantd.auth import breach
from tenantd.db import Database
from tests.auth.fake_signin_services import FakePwned, sha1_hex
from tests.auth.helpers import last_token, mail_sent, mails_to
from tests.helpers import data, error

BREACHED = "password1234"  # in the fake's list with a real-looking count
PADDED = "only a padding line"  # its suffix appears with count 0: padding, not a breach
CLEAN = "a long enough passphrase nobody used"


@pytest.fixture
async def pwned(aiohttp_server: Any) -> FakePwned:
    fake = FakePwned()
    fake.add(BREACHED, 2_413_945)
    fake.pad_with(PADDED)
    server: TestServer = await aiohttp_server(fake.app())
    fake.url = str(server.make_url("")).rstrip("/")
    return fake


@pytest.fixture
def mode() -> str:
    return "block"


@pytest.fixture
def env(env: dict[str, str], pwned: FakePwned, mode: str) -> dict[str, str]:
    env["PASSWORD_BREACH_CHECK"] = mode
    env["PWNED_PASSWORDS_URL"] = pwned.url
    return env


def breached_field(problem: dict[str, Any]) -> str:
    value: str = problem["details"]["fields"]["password"]
    return value


async def test_block_refuses_a_breached_password_at_sign_up_sending_only_the_prefix(
    client: Any, pwned: FakePwned, db: Database, mail_dir: Path
) -> None:
    response = await client.post(
        "/auth/register", json={"email": "ada@example.com", "password": BREACHED}
    )
    problem = await error(response, 422, "VALIDATION_ERROR")
    assert breached_field(problem).startswith("password_breached")
    assert await db.fetch_val("SELECT count(*) FROM users") == 0
    assert mails_to(mail_dir, "ada@example.com") == []
    # k-anonymity: only the first five hex characters of the SHA-1 left, padding asked for.
    (asked,) = pwned.requests
    digest = sha1_hex(BREACHED)
    assert asked["path"] == f"/range/{digest[:5]}"
    assert asked["headers"]["Add-Padding"] == "true"
    assert digest[5:] not in repr(asked) and BREACHED not in repr(asked)


async def test_block_accepts_clean_passwords_and_ignores_padding_entries(
    client: Any, pwned: FakePwned
) -> None:
    for number, password in enumerate((CLEAN, PADDED)):
        body = {"email": f"user{number}@example.com", "password": password}
        answer = await data(await client.post("/auth/register", json=body))
        assert "warnings" not in answer
    assert len(pwned.requests) == 2


async def test_block_applies_at_reset_and_change(
    make_client: Any, factory: Any, mail_dir: Path
) -> None:
    user = await factory.user()
    anonymous = await make_client()
    await data(
        await anonymous.post("/api/v1/auth/password-reset/request", json={"email": user.email})
    )
    await mail_sent(anonymous)
    token = last_token(mail_dir, user.email, "/reset-password")
    reset = await anonymous.post(
        "/api/v1/auth/password-reset/confirm", json={"token": token, "password": BREACHED}
    )
    assert breached_field(await error(reset, 422, "VALIDATION_ERROR")).startswith(
        "password_breached"
    )
    # The link was not spent by the refusal: a clean password goes through.
    await data(
        await anonymous.post(
            "/api/v1/auth/password-reset/confirm", json={"token": token, "password": CLEAN}
        )
    )

    browser = await make_client(cookies=await factory.cookies(user))
    change = await browser.post(
        "/api/v1/auth/password", json={"currentPassword": CLEAN, "newPassword": BREACHED}
    )
    assert breached_field(await error(change, 422, "VALIDATION_ERROR")).startswith(
        "password_breached"
    )
    login = await (await make_client()).post(
        "/api/v1/auth/login", json={"email": user.email, "password": CLEAN}
    )
    await data(login)


@pytest.mark.parametrize("mode", ["warn"])
async def test_warn_accepts_and_says_so_in_the_answer(
    make_client: Any, factory: Any, mail_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    client = await make_client()
    caplog.set_level(logging.INFO, logger="tenantd.auth.breach")
    answer = await data(
        await client.post("/auth/register", json={"email": "bo@example.com", "password": BREACHED})
    )
    assert answer["warnings"] == ["password_breached"]
    assert mails_to(mail_dir, "bo@example.com")
    assert all(BREACHED not in record.getMessage() for record in caplog.records)

    user = await factory.user()
    browser = await make_client(cookies=await factory.cookies(user))
    changed = await data(
        await browser.post(
            "/api/v1/auth/password",
            json={"currentPassword": user.password, "newPassword": BREACHED},
        )
    )
    assert changed["warnings"] == ["password_breached"] and changed["user"]["id"] == str(user.id)

    other = await factory.user()
    await data(
        await client.post("/api/v1/auth/password-reset/request", json={"email": other.email})
    )
    await mail_sent(client)
    token = last_token(mail_dir, other.email, "/reset-password")
    reset = await data(
        await client.post(
            "/api/v1/auth/password-reset/confirm", json={"token": token, "password": BREACHED}
        )
    )
    assert reset == {"warnings": ["password_breached"]}
    clean = await factory.user()
    await data(
        await client.post("/api/v1/auth/password-reset/request", json={"email": clean.email})
    )
    await mail_sent(client)
    token = last_token(mail_dir, clean.email, "/reset-password")
    quiet = await client.post(
        "/api/v1/auth/password-reset/confirm", json={"token": token, "password": CLEAN}
    )
    assert await data(quiet) == {}


@pytest.mark.parametrize("mode", ["off"])
async def test_off_asks_nobody(client: Any, pwned: FakePwned) -> None:
    await data(
        await client.post("/auth/register", json={"email": "cy@example.com", "password": BREACHED})
    )
    assert pwned.requests == []


async def metric(client: Any) -> float:
    text = await (await client.get("/metrics")).text()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "tenantd_password_breach_check_errors_total":
                return float(sample.value)
    raise AssertionError("tenantd_password_breach_check_errors_total is not exposed")


async def test_a_slow_or_failing_api_never_blocks_a_sign_up(
    client: Any,
    pwned: FakePwned,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(breach, "TIMEOUT_SECONDS", 0.3)
    monkeypatch.setattr(breach._Health, "up", True)
    before = await metric(client)
    caplog.set_level(logging.WARNING, logger="tenantd.auth.breach")
    pwned.delay = 5.0  # far beyond the timeout
    for number in range(2):
        body = {"email": f"slow{number}@example.com", "password": BREACHED}
        await data(await client.post("/auth/register", json=body))
    pwned.delay, pwned.status = 0.0, 503
    await data(
        await client.post(
            "/auth/register", json={"email": "down@example.com", "password": BREACHED}
        )
    )
    assert await metric(client) == before + 3
    outage = [r for r in caplog.records if "unavailable" in r.getMessage()]
    assert len(outage) == 1  # logged once for the outage, not once per sign-up
    # Back up: the check refuses again, and a later outage is logged again.
    pwned.status = 200
    await error(
        await client.post("/auth/register", json={"email": "up@example.com", "password": BREACHED}),
        422,
    )


async def test_an_unreachable_api_never_blocks_a_sign_up(
    env: dict[str, str], aiohttp_server: Any, db: Database, migrated: str, aiohttp_client: Any
) -> None:
    from tenantd.app.factory import create_app
    from tenantd.app.settings import load_settings

    env["PWNED_PASSWORDS_URL"] = "http://127.0.0.1:9"  # discard port: connection refused
    server = await aiohttp_server(create_app(load_settings(environ=env), migrated))
    client = await aiohttp_client(server)
    before = await metric(client)
    answer = await data(
        await client.post("/auth/register", json={"email": "dee@example.com", "password": BREACHED})
    )
    assert "warnings" not in answer
    assert await metric(client) == before + 1
